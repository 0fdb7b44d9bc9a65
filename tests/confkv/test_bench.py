"""Quality benchmarks (`bench ppl/niah/klshift/memory`) on tiny random models: structure and what must hold."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
import torch

from confkv.bench import common, klshift, memory, niah, ppl
from confkv.bench.stats import wilson
from confkv.policies import get_policy
from confkv.session import ConfKVSession
from confkv.testing import tiny_model

TINY = {"n_low": "32", "n_high": "48", "protect": "8", "int8_after": "8"}


class CharTokenizer:
    """A byte-level tokenizer over the tiny models' 512-token vocabulary (ids 3..258 = bytes)."""

    bos_token_id = 1
    eos_token_id = 2

    def __call__(self, text, add_special_tokens=False, return_tensors=None):
        ids = [b + 3 for b in text.encode("latin-1", "replace")]
        return type("Enc", (), {"input_ids": ids})()

    def decode(self, ids, skip_special_tokens=False):
        return bytes(i - 3 for i in ids if 3 <= i < 259).decode("latin-1")


def random_ids(n: int, vocab: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, vocab) for _ in range(n)]


# -- common ----------------------------------------------------------------------------------------------------------
def test_matched_fixed_budget_minimizes_the_mean_kept_difference():
    ends = list(range(1, 101))  # token by token, 100 steps
    for target in (10.0, 37.5, 80.0):
        b = common.matched_fixed_budget(ends, target)
        best = min(range(1, 101), key=lambda x: abs(sum(min(e, x) for e in ends) / 100 - target))
        assert abs(sum(min(e, b) for e in ends) / 100 - target) == pytest.approx(
            abs(sum(min(e, best) for e in ends) / 100 - target))
    assert common.matched_fixed_budget(ends, 1000.0) == 100  # cannot keep more than was seen


def test_parse_bible_output_keeps_prose_only():
    raw = "\nGenesis 1\n\n  1 In the beginning.\n  2 And the earth.\n\nGenesis 2\n\n  1 Thus the heavens.\n"
    assert common.parse_bible_output(raw) == "In the beginning. And the earth.\n\nThus the heavens."


def test_missing_corpus_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(common.shutil, "which", lambda _name: None)
    with pytest.raises(common.CorpusMissingError, match="apt-get install bible-kjv"):
        common.load_corpus()


# -- ppl -------------------------------------------------------------------------------------------------------------
def test_ppl_full_equals_teacher_forced_forward_for_any_stride():
    model, vocab = tiny_model("llama")
    ids = random_ids(40, vocab)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
    want = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:])).item()
    for stride in (1, 7):
        nlls, _ = ppl.stream_nll(tiny_model("llama")[0], ids, get_policy("full"), stride)
        assert len(nlls) == len(ids) - 1
        assert sum(nlls) / len(nlls) == pytest.approx(want, abs=1e-4)


def test_ppl_matched_footprints_and_exact_ablation_rate():
    model, vocab = tiny_model("qwen2")
    cfg = ppl.PplConfig(n_tokens=96, stride=4, overrides=TINY)
    result = ppl.run_ppl(model, random_ids(96, vocab, seed=1), cfg)
    rows = result["policies"]
    assert set(rows) == set(cfg.policies)
    for name, row in rows.items():
        assert math.isfinite(row["ppl"]) and row["ppl"] > 1, name
        assert row["peak_kv_bytes"] <= rows["full"]["peak_kv_bytes"], name
    # the ablation evicts exactly at confkv-noint8's rate: identical kept tokens
    for name in ppl.ABLATION:
        assert rows[name]["replayed"]
        assert rows[name]["mean_kv_tokens"] == rows[ppl.NOINT8]["mean_kv_tokens"]
        assert rows[name]["peak_kv_tokens"] == rows[ppl.NOINT8]["peak_kv_tokens"]
    # fixed budgets matched to confkv's mean resident BYTES (one budget step moves the mean by < one fp token's
    # bytes); confkv stores old tokens in INT8, so the model-dtype baselines get fewer tokens for the same bytes
    token_bytes = memory.KVConfig.from_model(model).kept_bytes(1)
    for name in common.FIXED_BASELINES:
        assert abs(rows[name]["mean_kv_bytes"] - rows["confkv"]["mean_kv_bytes"]) <= token_bytes, name
        assert rows[name]["budget"] == result["matched_fixed_budget"][name]
    for name in ("sliding", "h2o"):
        assert rows[name]["mean_kv_tokens"] < rows["confkv"]["mean_kv_tokens"] - 2, name
    assert rows["confkv"]["gate_open_rate"] is not None and rows["sliding"]["gate_open_rate"] is None
    assert rows["full"]["mean_kv_tokens"] > rows["confkv"]["mean_kv_tokens"]
    gap = result.get("pyramid_gap_closed")
    sliding, full, pyr = (rows[n]["ppl"] for n in ("sliding", "full", "confkv-pyramid"))
    assert gap is None or gap == pytest.approx((sliding - pyr) / (sliding - full))
    assert len(result["confkv_budget_trajectory"]) == 96 // 4


def test_ppl_config_rejects_unmatched_requests():
    with pytest.raises(ValueError, match="include confkv"):
        ppl.PplConfig(n_tokens=64, policies=("full", "sliding")).validate()
    with pytest.raises(ValueError, match="include confkv-noint8"):
        ppl.PplConfig(n_tokens=64, policies=("confkv", "random")).validate()


# -- niah ------------------------------------------------------------------------------------------------------------
def test_niah_cell_layout():
    tok = CharTokenizer()
    hay = tok("In the beginning. God created. And the earth was void. " * 10).input_ids
    cell = niah.make_cell(tok, hay, 200, 0.5, "12345", prefix=(1,))
    assert len(cell.ids) + len(cell.question) == 200
    assert cell.ids[0] == 1
    text = tok.decode(cell.ids)
    assert "The secret passcode is 12345." in text
    assert tok.decode(cell.ids[cell.needle_at:]).startswith(" The secret passcode is 12345.")
    assert tok.decode(cell.ids[: cell.needle_at]).rstrip().endswith(".")  # inserted at a sentence end
    with pytest.raises(ValueError, match="too short"):
        niah.make_cell(tok, hay, 40, 0.5, "12345")


def test_niah_seed_draws_fresh_passcodes():
    """A held-out NIAH run must not reuse the passcodes that tuned a policy: the seed alone decides them."""
    model, _ = tiny_model("llama")
    tok = CharTokenizer()
    hay = tok("And God said, Let there be light: and there was light. " * 8).input_ids
    codes = {}
    for seed in (0, 1, 0):
        cfg = niah.NiahConfig(lengths=(176,), depths=(0.5,), policies=("full",), prefill_chunk=64,
                              max_new_tokens=1, needles=3, seed=seed, trace=False)
        result = niah.run_niah(model, tok, hay, cfg, prefix=(1,))
        assert result["seed"] == seed
        got = [c["code"] for c in result["cells"]]
        assert codes.setdefault(seed, got) == got  # reproducible
    assert not set(codes[0]) & set(codes[1])


def test_niah_accuracy_and_matched_footprint():
    model, _ = tiny_model("llama")
    tok = CharTokenizer()
    hay = tok("And God said, Let there be light: and there was light. " * 8).input_ids
    cfg = niah.NiahConfig(lengths=(176, 208), depths=(1.0,), overrides=TINY, prefill_chunk=16,
                          max_new_tokens=3, needles=2)
    result = niah.run_niah(model, tok, hay, cfg, prefix=(1,))
    assert set(result["policies"]) == set(niah.POLICIES)
    assert len(result["cells"]) == 2 * cfg.needles * len(niah.POLICIES)
    assert len({c["answer"] for c in result["cells"] if c["policy"] == "full"}) >= 1
    for name, row in result["policies"].items():
        assert 0.0 <= row["accuracy"] <= 1.0 and row["trials"] == 2 * cfg.needles
        assert row["correct"] == sum(c["correct"] for c in result["cells"] if c["policy"] == name)
        assert row["ci95"][0] <= row["accuracy"] <= row["ci95"][1]
        assert sum(int(v.split("/")[1]) for v in row["by_cell"].values()) == row["trials"]
    token_bytes = memory.KVConfig.from_model(model).kept_bytes(1)
    for c in result["cells"]:
        if c["policy"] in common.FIXED_BASELINES:  # matched in bytes to confkv's run of the same trial
            ref = next(r for r in result["cells"] if r["policy"] == "confkv" and
                       (r["length"], r["depth"], r["needle"]) == (c["length"], c["depth"], c["needle"]))
            assert abs(c["mean_kv_bytes"] - ref["mean_kv_bytes"]) <= token_bytes
    tr = result["trace"]
    assert len(tr["confidence"]) == len(tr["budget"]) >= tr["question_end"]
    assert all(0.0 <= c <= 1.0 for c in tr["confidence"])
    assert set(tr["budget"]) <= {32, 48}


def test_niah_can_match_the_baselines_to_a_recall_policy_counting_its_cold_tier():
    model, _ = tiny_model("llama")
    tok = CharTokenizer()
    hay = tok("And God said, Let there be light: and there was light. " * 8).input_ids
    cfg = niah.NiahConfig(lengths=(176,), depths=(0.0,), overrides={**TINY, "cold": "256"}, prefill_chunk=16,
                          max_new_tokens=2, needles=1, policies=("confkv-recall", "confkv-fixed"),
                          match="confkv-recall", match_total=True, trace=False)
    result = niah.run_niah(model, tok, hay, cfg, prefix=(1,))
    rows = {c["policy"]: c for c in result["cells"]}
    recall, fixed = rows["confkv-recall"], rows["confkv-fixed"]
    assert recall["mean_cold_bytes"] > 0 and fixed["mean_cold_bytes"] == 0
    token_bytes = memory.KVConfig.from_model(model).kept_bytes(1)
    assert abs(fixed["mean_kv_bytes"] - (recall["mean_kv_bytes"] + recall["mean_cold_bytes"])) <= token_bytes
    # Both matchings from one gated run: the same budgets as the two separate runs, one label each.
    both = niah.run_niah(model, tok, hay, dataclasses.replace(cfg, match_total=False, match_both=True), prefix=(1,))
    rows = {c["policy"]: c for c in both["cells"]}
    assert sorted(rows) == ["confkv-fixed", "confkv-fixed@total", "confkv-recall"]
    assert set(both["policies"]) == set(rows) and both["matched_both"]
    assert rows["confkv-fixed@total"]["budget"] == fixed["budget"] > rows["confkv-fixed"]["budget"]
    assert abs(rows["confkv-fixed"]["mean_kv_bytes"] - recall["mean_kv_bytes"]) <= token_bytes


def test_wilson_interval():
    lo, hi = wilson(0, 9)
    assert lo == 0.0 and 0.25 < hi < 0.35  # 0/9 does not mean "never": up to ~30% is consistent with it
    lo, hi = wilson(9, 9)
    assert hi == 1.0 and 0.65 < lo < 0.75
    lo, hi = wilson(50, 100)
    assert lo == pytest.approx(0.404, abs=1e-3) and hi == pytest.approx(0.596, abs=1e-3)


# -- klshift ---------------------------------------------------------------------------------------------------------
def test_statistics_helpers():
    x = [0.1, 0.4, 0.35, 0.8, 0.6, 0.2, 0.9, 0.5]
    y = [2.0, 1.1, 1.5, 0.3, 0.9, 1.7, 0.2, 1.0]
    r = klshift.pearson(x, y)
    assert r == pytest.approx(torch.corrcoef(torch.tensor([x, y]))[0, 1].item(), abs=1e-6)
    lo, hi = klshift.fisher_ci(r, len(x))
    assert lo < r < hi
    blo, bhi = klshift.bootstrap_ci(x, y, 500)
    assert -1 <= blo <= bhi <= 1
    assert klshift.spearman(x, [-v for v in x]) == pytest.approx(-1.0)


def test_klshift_definition_on_a_tiny_model():
    model, vocab = tiny_model("llama")
    ids = random_ids(96, vocab, seed=2)
    cfg = klshift.KLShiftConfig(n_tokens=96, n_positions=8, ablate=16, bootstrap=100)
    result = klshift.run_klshift(model, ids, cfg)
    assert result["n_positions"] == 8
    lo, hi = result["ci_fisher"]
    assert lo <= result["r"] <= hi
    assert all(p["kl"] >= 0 and 0 <= p["confidence"] <= 1 for p in result["points"])
    # recompute one point by hand: remove the 16 tokens before t, keep positions
    t = result["points"][3]["t"]
    with torch.no_grad():
        p = torch.log_softmax(model(input_ids=torch.tensor([ids[: t + 1]])).logits[0, -1], -1)
        keep = [*range(t - 16), t]
        q = torch.log_softmax(model(input_ids=torch.tensor([[ids[i] for i in keep]]),
                                    position_ids=torch.tensor([keep])).logits[0, -1], -1)
    assert result["points"][3]["kl"] == pytest.approx(float((p.exp() * (p - q)).sum()), rel=1e-3, abs=1e-5)


# -- memory ----------------------------------------------------------------------------------------------------------
def test_memory_arithmetic_is_exact_against_a_real_cache():
    model, vocab = tiny_model("qwen2", num_hidden_layers=3)
    cfg = memory.KVConfig.from_model(model)
    session = ConfKVSession(model, get_policy("confkv", TINY))
    session.append(random_ids(70, vocab))
    for tok in random_ids(15, vocab, seed=3):
        session.step(tok)
    layers = session.cache.layers
    assert sum(layer.q8.n for layer in layers) > 0  # INT8 is really exercised
    want = session.cache.memory().kv_bytes
    assert sum(cfg.cache_bytes(layer.fp.n, layer.q8.n) for layer in layers) == want * cfg.layers
    assert session.cache.full_kv_bytes() == cfg.bytes(85)


def test_memory_qwen32b_numbers():
    q = memory.QWEN25_32B
    assert q.fp_token_bytes == 2 * 64 * 8 * 128 * 2 == 262144
    result = memory.run_memory(q, [True], n_tokens=4096, n_low=256, n_high=512, int8_after=64)
    assert result["full_bytes"] == 4096 * 262144
    slot = 64 * 8 * 12  # position + accumulator of one kept token, every layer and KV head
    assert result["confkv"]["final_bytes"] == 64 * 262144 + 448 * 2 * 64 * 8 * 132 + 512 * slot
    low = memory.run_memory(q, [False], n_tokens=4096)
    assert low["confkv"]["final_bytes"] == 64 * 262144 + 192 * 2 * 64 * 8 * 132 + 256 * slot
    assert low["confkv"]["peak_bytes"] == low["confkv"]["final_bytes"]  # the budget is reached, never exceeded
    mixed = memory.run_memory(q, [True, False, False], n_tokens=4096)
    assert low["confkv"]["final_bytes"] <= mixed["confkv"]["final_bytes"] <= result["confkv"]["final_bytes"]
    assert mixed["confkv"]["peak_bytes"] <= result["confkv"]["final_bytes"]


def test_memory_cli_reads_a_ppl_trajectory(tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    ppl_json = tmp_path / "ppl-x.json"
    ppl_json.write_text(json.dumps({"stride": 2, "confkv_budget_trajectory": [192, 96, 96],
                                    "policies": {"confkv": {"gate": [96, 192, 0.5]}}}))
    res = CliRunner().invoke(app, ["bench", "memory", "--trajectory", str(ppl_json), "--out", str(tmp_path),
                                   "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["confkv"]["share_high"] == pytest.approx(1 / 3)
    assert data["full_bytes"] == 4096 * 262144
    assert (tmp_path / "memory-qwen2.5-32b.json").exists()
    bad = CliRunner().invoke(app, ["bench", "memory", "--trajectory", str(tmp_path / "nope.json")])
    assert bad.exit_code == 2 and "Invalid value" in bad.output


def test_save_outputs_writes_the_json_and_every_plot(tmp_path):
    drawn = []

    def draw(path):
        path.write_bytes(b"png")
        drawn.append(path.name)

    paths = common.save_outputs({"a": 1}, tmp_path, "niah", "org/model-x", {"niah": draw, "niah-trace": draw})
    assert [p.name for p in paths] == ["niah-model-x.json", "niah-model-x.png", "niah-trace-model-x.png"]
    assert drawn == ["niah-model-x.png", "niah-trace-model-x.png"]
    assert json.loads(paths[0].read_text()) == {"a": 1}
