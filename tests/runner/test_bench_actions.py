"""`bench actions`: cases captured from the real sites, judged by meaning; the bench runs end to end (tiny model)."""

from __future__ import annotations

import pytest

from confkv.models.precision import apply_precision
from runner.bench_actions import capture_cases, judge, run_bench

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def cases():
    return capture_cases([("shopping_001.yaml", 0), ("shopping_001.yaml", 2)])


def test_replies_are_judged_by_the_element_they_name(cases):
    search, answer = cases
    box = next(i for i, (role, name) in search.observation.nodes.items() if name == "Search products")
    other = next(i for i in search.observation.nodes if i != box)
    assert judge(f"type [{box}] [ironleaf classic coffee mug] [1]", search)[0]
    assert judge(f"type [{box}] [Ironleaf Classic Coffee Mug] [0]", search)[0]
    assert judge(f"type [{box}] [tea pot] [1]", search) == (False, "typed 'tea pot', expected 'Ironleaf Classic Coffee Mug'")
    assert judge(f"type [{other}] [Ironleaf Classic Coffee Mug] [1]", search)[1].startswith("grounding")
    assert judge("stop [The price is $9.95]", answer)[0]
    assert not judge("stop [$19.95]", answer)[0]
    assert judge("I would click", answer)[1].startswith("format")


def test_bench_runs_every_config_with_a_tiny_model():
    from confkv.testing import tiny_chat_tokenizer, tiny_model

    def loader(name, int8, dtype):
        model, _ = tiny_model("qwen2", max_position_embeddings=32768)
        if int8:
            apply_precision(model, "int8")
        return model, tiny_chat_tokenizer()

    report = run_bench("tiny", limit=1, loader=loader)
    assert set(report["configs"]) == {"fp32/free", "fp32/constrained", "int8/free", "int8/constrained"}
    for config in report["configs"].values():
        assert config["cases"] == 1 and config["s_per_decision"] > 0 and config["mean_prefill_tokens"] > 100
    constrained = report["configs"]["fp32/constrained"]["decisions"][0]
    assert not constrained["why"].startswith("format")  # the grammar always yields a parseable action
