"""`--dtype` names, loading in a dtype, and the dtype benchmark (`auto`'s measured choice: test_precision.py)."""

from __future__ import annotations

import pytest
import torch

from confkv.models.dtype import DtypeError, dtype_name, resolve_dtype


def test_explicit_names_aliases_and_errors():
    assert resolve_dtype("bf16", "cpu")[0] == torch.bfloat16  # asked for: honoured even if slow
    assert resolve_dtype("float16")[0] == torch.float16 and resolve_dtype(None)[0] == torch.float32
    assert dtype_name(torch.bfloat16) == "bf16" and dtype_name(torch.float32) == "fp32"
    with pytest.raises(DtypeError, match="unknown dtype 'int4'; expected one of auto, fp32, ") as err:
        resolve_dtype("int4")
    assert "fp32-float-w8a8" in str(err.value) and "bf16-w8a8-w8a8" in str(err.value)


def test_load_applies_the_dtype_to_a_saved_model(tmp_path):
    from confkv.models import load
    from confkv.testing import tiny_model

    model, _ = tiny_model("llama")
    model.save_pretrained(tmp_path / "m", safe_serialization=True)
    from confkv.testing import tiny_chat_tokenizer

    tiny_chat_tokenizer().save_pretrained(tmp_path / "m")
    loaded, _ = load(tmp_path / "m", dtype="bf16")
    assert next(loaded.parameters()).dtype == torch.bfloat16
    assert any(type(m).__name__ == "RowGemvLinear" for m in loaded.modules())
    assert next(load(tmp_path / "m")[0].parameters()).dtype == torch.float32


def test_dtype_bench_interleaves_and_scores_greedy_agreement():
    from confkv.bench.dtype import format_report, run_dtype_bench
    from confkv.testing import tiny_model

    model, _ = tiny_model("llama")
    models = {"fp32": model, "bf16": tiny_model("llama")[0].to(torch.bfloat16)}
    prompts = [list(range(5, 45)), list(range(50, 70))]
    report = run_dtype_bench(models.__getitem__, ["fp32", "bf16"], prompts, decode_tokens=6)
    fp32, bf16 = report["rows"]
    assert fp32["greedy_identical"] == 2 and fp32["greedy_prefix_share"] == 1.0 and fp32["step_time_vs_reference"] == 1
    assert all(len(t) == 6 for t in bf16["tokens"]) and 0 <= bf16["greedy_prefix_share"] <= 1
    assert fp32["prefill_tok_s"] > 0 and bf16["decode_ms_per_token"] > 0
    assert "bf16" in format_report(report)[-1]


def test_bench_decode_runs_several_dtypes_in_one_invocation(tmp_path):
    import json

    from typer.testing import CliRunner

    from cli.main import app
    from confkv.testing import tiny_chat_tokenizer, tiny_model

    model, _ = tiny_model("llama")
    model.save_pretrained(tmp_path / "m", safe_serialization=True)
    tiny_chat_tokenizer().save_pretrained(tmp_path / "m")
    args = ["bench", "decode", "--model", str(tmp_path / "m"), "--contexts", "40", "--steps", "2", "--repeats", "1",
            "--set", "n_low=12", "--set", "n_high=20", "--set", "int8_after=6", "--set", "protect=4",
            "--set", "slack=2", "--set", "prefill_chunk=16", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, [*args, "--dtypes", "fp32,bf16", "--json"])
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout.strip().splitlines()[-1])
    assert [r["dtype"] for r in reports] == ["fp32", "bf16"]
    assert {r["variant"] for r in reports[1]["rows"]} == {"plain", "full", "confkv"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["decode_m_bf16.json", "decode_m_fp32.json"]
    bad = CliRunner().invoke(app, [*args, "--dtypes", "fp32,int4"])
    assert bad.exit_code != 0 and "int4" in bad.output


def test_dtype_bench_steps_start_from_the_shared_prefix():
    """Each prompt is decoded after the prefix, as the agent decodes a step after its cached system prompt."""
    from confkv.bench.dtype import run_dtype_bench
    from confkv.session import ConfKVSession
    from confkv.testing import tiny_model

    model, _ = tiny_model("llama")
    prefix, step = list(range(100, 130)), list(range(5, 25))
    report = run_dtype_bench(lambda _: model, ["fp32"], [step], decode_tokens=5, prefix=prefix)
    whole = ConfKVSession(model, "full")
    with torch.no_grad():
        whole.append(prefix + step)
        expected = whole.decode(5)
    assert report["prefix_tokens"] == 30 and report["prompt_tokens"] == [20]
    assert report["rows"][0]["tokens"] == [expected]
