"""`bench cpu-peer`: our side's figures for every variant and length, the table's ratios against a peer, and a
clear message where llama.cpp is not installed (it is an optional extra, never a test dependency)."""

from __future__ import annotations

import sys

from confkv.bench.cpu_peer import format_report, run_cpu_peer
from confkv.testing import tiny_model


def test_our_side_reports_prefill_and_decode_for_every_variant():
    model, _ = tiny_model("llama", max_position_embeddings=512)
    small = {"n_low": "12", "n_high": "20", "int8_after": "6", "protect": "4", "slack": "2", "prefill_chunk": "16"}
    report = run_cpu_peer(model, None, prefill=(48,), decode=(64,), steps=2, confkv_overrides=small)
    assert set(report["rows"]) == {"plain", "full", "confkv"} and report["gguf"] is None
    for fig in report["rows"].values():
        assert fig["prefill_tok_s"][48] > 0 and fig["decode_ms"][64] > 0
    peer = {"prefill_tok_s": {48: 2 * report["rows"]["full"]["prefill_tok_s"][48]},
            "decode_ms": {64: report["rows"]["full"]["decode_ms"][64] / 4}}  # fmt: skip
    lines = format_report({**report, "gguf": "x.gguf", "rows": {**report["rows"], "llama.cpp": peer}})
    full = lines[lines.index(next(line for line in lines if line.startswith("full"))) + 1]
    assert full.split()[-2:] == ["0.50x", "0.25x"]  # ours over the peer's: half its prefill, a quarter its decode


def test_cpu_peer_without_llama_cpp_says_how_to_install_it(monkeypatch):
    from typer.testing import CliRunner

    from cli.main import app

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` raises ImportError
    result = CliRunner().invoke(app, ["bench", "cpu-peer", "--model", "smollm2-135m"])
    assert result.exit_code != 0 and "pip install llama-cpp-python" in result.output


def test_decode_breakdown_adds_up_to_the_step_and_counts_the_weights_each_precision_holds():
    from confkv.bench.step_breakdown import PARTS, decode_breakdown, format_breakdown
    from confkv.models.precision import apply_precision
    from confkv.testing import tiny_model

    model, _ = tiny_model("qwen2")
    params = sum(m.weight.numel() for n, m in model.model.layers.named_modules() if n.endswith("_proj"))
    bias = sum(m.bias.numel() for n, m in model.model.layers.named_modules() if n.endswith("_proj") and m.bias is not None)
    b = decode_breakdown(model, 24, 3)
    assert set(b["ms"]) == set(PARTS) and all(v >= 0 for v in b["ms"].values())
    assert abs(sum(b["ms"].values()) - b["step_ms"]) < 0.01 * b["step_ms"]
    assert b["ms"]["decoder Linears"] > 0 and b["ms"]["attention (less its projections)"] > 0
    assert b["weights_bytes"]["decoder Linears"] == 4 * (params + bias)
    apply_precision(model, "fp32-bf16-bf16")  # bf16 weights only (the fp32 copy is dropped), fp32 biases
    assert decode_breakdown(model, 24, 3)["weights_bytes"]["decoder Linears"] == 2 * params + 4 * bias
    assert len(format_breakdown(b)) == 1 + len(PARTS)
