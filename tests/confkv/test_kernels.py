"""Segmented attention: the PyTorch reference against a naive dense oracle, and the Triton kernel against the reference.

Tolerances (max abs error):
- reference vs oracle (oracle = dequantize everything, repeat_kv, fp64 softmax): fp32 inputs 2e-5 on the output and
  1e-6 on the mass; fp16 inputs 2e-3 on the output (one fp16 rounding of a value of size ~1) and 1e-6 on the mass.
- Triton kernel vs reference: fp32 2e-4 on the output and 1e-5 on the mass; fp16/bf16 inputs 1e-2 (the kernel
  multiplies in the model dtype on GPU, like flash attention), 1e-4 on the mass.
Triton tests run under `TRITON_INTERPRET=1` on CPU tensors unless a CUDA GPU is present and the interpreter is off
(scripts/gpu_check.sh), in which case they run the compiled kernel on the GPU.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest
import torch

# Must be set before triton.jit runs, i.e. before confkv.kernels.triton_decode is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from confkv.kernels import (  # noqa: E402
    SegmentedKV,
    dequantize,
    quantize_int8,
    reference_attention,
    segmented_attention,
    select_backend,
)

HAS_TRITON = importlib.util.find_spec("triton") is not None


def naive_attention(
    q: torch.Tensor, kv: SegmentedKV, q_pos: torch.Tensor | None, scaling: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense fp64 oracle: dequantize both segments, concatenate, repeat K/V per query head, mask, softmax."""
    parts_k, parts_v, parts_p = [], [], []
    if kv.n_int8:
        k_deq = dequantize(kv.k_q, kv.k_scale, torch.float64)
        parts_k.append(k_deq if kv.k_channel is None else k_deq * kv.k_channel.double().unsqueeze(2))
        parts_v.append(dequantize(kv.v_q, kv.v_scale, torch.float64))
        parts_p.append(kv.pos_q)
    if kv.n_fp:
        parts_k.append(kv.k_fp.double())
        parts_v.append(kv.v_fp.double())
        parts_p.append(kv.pos_fp)
    k, v, pos = torch.cat(parts_k, 2), torch.cat(parts_v, 2), torch.cat(parts_p, 2)
    g = q.shape[1] // k.shape[1]
    k, v, pos = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), pos.repeat_interleave(g, 1)
    scores = q.double() @ k.transpose(-1, -2) * scaling  # [B,Hq,L,T]
    if q_pos is not None:
        scores = scores.masked_fill(pos[:, :, None, :] > q_pos[:, None, :, None], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return (p @ v).to(q.dtype), p.mean(dim=2).float()


def make_case(
    b: int, hkv: int, g: int, n_q: int, d: int, t: int, n_int8: int, dtype: torch.dtype, with_pos: bool, seed: int,
    device: str = "cpu",
) -> tuple[torch.Tensor, SegmentedKV, torch.Tensor | None]:
    """Random q/K/V; positions are a shuffled subset of 0..2T (like a cache after eviction), different per head."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hkv * g, n_q, d, generator=gen).to(dtype)
    k = (torch.randn(b, hkv, t, d, generator=gen) * 1.5).to(dtype)
    v = torch.randn(b, hkv, t, d, generator=gen).to(dtype)
    pos = torch.stack([torch.randperm(2 * t, generator=gen)[:t] for _ in range(b * hkv)]).view(b, hkv, t)
    kv = SegmentedKV.from_dense(k.to(device), v.to(device), n_int8, pos.to(device))
    q_pos = None
    if with_pos:  # the last query sees about 3/4 of the keys, earlier ones fewer
        q_pos = (torch.arange(n_q) + int(1.5 * t) - n_q).expand(b, n_q).contiguous().to(device)
    return q.to(device), kv, q_pos


CASES = [
    # b, hkv, g, L, d, t, n_int8
    pytest.param(1, 2, 1, 1, 16, 37, 0, id="int8-empty-mha"),
    pytest.param(2, 2, 4, 1, 32, 45, 45, id="int8-full-gqa4"),
    pytest.param(1, 1, 4, 1, 64, 70, 33, id="mixed-gqa4"),
    pytest.param(2, 3, 1, 3, 16, 29, 11, id="mixed-chunk3"),
    pytest.param(1, 2, 4, 5, 24, 51, 20, id="mixed-gqa4-chunk5-d24"),
]


@pytest.mark.parametrize("with_pos", [False, True], ids=["no-pos", "pos"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize(("b", "hkv", "g", "n_q", "d", "t", "n_int8"), CASES)
def test_reference_matches_dense_oracle(b, hkv, g, n_q, d, t, n_int8, dtype, with_pos):
    q, kv, q_pos = make_case(b, hkv, g, n_q, d, t, n_int8, dtype, with_pos, seed=t + n_int8)
    out, mass = reference_attention(q, kv, q_pos, d**-0.5, return_mass=True)
    want_out, want_mass = naive_attention(q, kv, q_pos, d**-0.5)
    assert out.dtype == dtype and out.shape == q.shape
    assert mass.dtype == torch.float32 and mass.shape == (b, hkv * g, t)
    atol = 2e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(out.float(), want_out.float(), atol=atol, rtol=0)
    torch.testing.assert_close(mass, want_mass, atol=1e-6, rtol=0)
    torch.testing.assert_close(mass.sum(-1), torch.ones(b, hkv * g), atol=1e-5, rtol=0)


@pytest.mark.parametrize("keep_scores", [True, False], ids=["scores-kept", "scores-recomputed"])
def test_reference_blockwise_equals_single_block(keep_scores):
    """Tiny blocks (many online-softmax steps, blocks not dividing the segments) give the same result."""
    q, kv, q_pos = make_case(2, 2, 3, 4, 16, 53, 21, torch.float32, True, seed=7)
    budget = 1 << 20 if keep_scores else 2 * 2 * 12 * 7  # second: too small to keep all scores -> second pass
    out, mass = reference_attention(q, kv, q_pos, 0.3, True, score_budget=budget, max_block=7)
    want_out, want_mass = naive_attention(q, kv, q_pos, 0.3)
    torch.testing.assert_close(out, want_out, atol=2e-5, rtol=0)
    torch.testing.assert_close(mass, want_mass, atol=1e-6, rtol=0)


def test_reference_query_that_sees_nothing_gets_zeros():
    q, kv, _ = make_case(1, 2, 2, 2, 16, 20, 8, torch.float32, False, seed=3)
    q_pos = torch.tensor([[-1, 1000]])  # first query precedes every key, second sees all
    out, mass = reference_attention(q, kv, q_pos, None, True)
    assert torch.isfinite(out).all() and torch.isfinite(mass).all()
    assert out[:, :, 0].abs().max() == 0
    torch.testing.assert_close(mass.sum(-1), torch.full((1, 4), 0.5), atol=1e-6, rtol=0)  # averaged with a 0 row


def test_quantize_int8_error_bound_and_zero_rows():
    x = torch.randn(2, 3, 5, 16)
    x[0, 1, 2] = 0
    q, scale = quantize_int8(x)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == x.shape[:-1]
    assert scale[0, 1, 2] == 0 and (q[0, 1, 2] == 0).all()
    err = (dequantize(q, scale) - x).abs()
    assert (err <= scale.unsqueeze(-1) / 2 + 1e-7).all()
    assert q.abs().amax(-1)[scale > 0].eq(127).all()  # absmax maps to +-127


def test_bad_input_is_rejected_with_a_clear_message():
    q, kv, _ = make_case(1, 2, 2, 1, 16, 10, 4, torch.float32, False, seed=0)
    with pytest.raises(ValueError, match="multiple of KV heads"):
        reference_attention(q[:, :3], kv)
    with pytest.raises(ValueError, match="q_pos must be"):
        reference_attention(q, kv, torch.zeros(1, 2, dtype=torch.long))
    bad = SegmentedKV(kv.k_q.float(), kv.v_q, kv.k_scale, kv.v_scale, kv.k_fp, kv.v_fp, kv.pos_q, kv.pos_fp)
    with pytest.raises(ValueError, match="int8"):
        reference_attention(q, bad)
    with pytest.raises(ValueError, match="no keys"):
        reference_attention(q, SegmentedKV(None, None, None, None, None, None))


def test_backend_selection_and_override(monkeypatch):
    q = torch.zeros(1, 2, 1, 16)
    monkeypatch.delenv("CONFKV_ATTENTION", raising=False)
    assert select_backend(q) == "reference"  # CPU tensors never pick Triton on their own
    monkeypatch.setenv("CONFKV_ATTENTION", "flash")
    with pytest.raises(ValueError, match="CONFKV_ATTENTION"):
        select_backend(q)
    monkeypatch.setenv("CONFKV_ATTENTION", "reference")
    q, kv, q_pos = make_case(1, 1, 2, 1, 16, 9, 3, torch.float32, True, seed=1)
    out, mass = segmented_attention(q, kv, q_pos, None, False)
    assert mass is None
    torch.testing.assert_close(out, naive_attention(q, kv, q_pos, 16**-0.5)[0], atol=2e-5, rtol=0)


# ---------------------------------------------------------------- Triton kernel (interpreter on CPU, compiled on GPU)

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
TRITON_DEVICE = "cpu" if INTERPRETED or not torch.cuda.is_available() else "cuda"
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is optional on this platform)")
KERNEL_ATOL = {torch.float32: 2e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}  # bf16: one ulp at |x| in [2, 4)


def _kernel(*args, **kwargs):
    from confkv.kernels.triton_decode import triton_attention

    return triton_attention(*args, **kwargs)


@pytest.mark.triton
@needs_triton
@pytest.mark.parametrize("with_pos", [False, True], ids=["no-pos", "pos"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(("b", "hkv", "g", "n_q", "d", "t", "n_int8"), CASES[:4])
def test_kernel_matches_reference(b, hkv, g, n_q, d, t, n_int8, dtype, with_pos):
    """Two splits and 16-key blocks, so split merging and partial tail blocks are exercised on tiny shapes."""
    q, kv, q_pos = make_case(b, hkv, g, n_q, d, t, n_int8, dtype, with_pos, seed=t, device=TRITON_DEVICE)
    out, mass = _kernel(q, kv, q_pos, 0.2, True, num_splits=2, block_n=16)
    want_out, want_mass = reference_attention(q, kv, q_pos, 0.2, True)
    assert out.dtype == dtype and out.shape == q.shape and mass.shape == want_mass.shape
    torch.testing.assert_close(out.float(), want_out.float(), atol=KERNEL_ATOL[dtype], rtol=0)
    mass_atol = 1e-5 if dtype == torch.float32 else 1e-4
    torch.testing.assert_close(mass, want_mass, atol=mass_atol, rtol=0)
    torch.testing.assert_close(mass.sum(-1), torch.ones_like(mass[..., 0]), atol=1e-4, rtol=0)


@pytest.mark.triton
@needs_triton
def test_kernel_on_strided_cache_views_and_masked_rows():
    """The cache may hand over slices of preallocated buffers; a query that sees no key gets zeros, not NaN."""
    dev = TRITON_DEVICE
    gen = torch.Generator().manual_seed(5)
    cap, t, n_int8, d = 64, 40, 17, 16
    k = torch.randn(1, 2, cap, d, generator=gen).to(dev)[:, :, :t]
    v = torch.randn(1, 2, cap, d, generator=gen).to(dev)[:, :, :t]
    kv = SegmentedKV.from_dense(k, v, n_int8)  # positions 0..t-1
    q = torch.randn(1, 4, 2, d, generator=gen).to(dev)
    q_pos = torch.tensor([[-1, 25]], device=dev)
    out, mass = _kernel(q, kv, q_pos, None, True, num_splits=3, block_n=16)
    want_out, want_mass = reference_attention(q, kv, q_pos, None, True)
    assert torch.isfinite(out).all() and out[:, :, 0].abs().max() == 0
    torch.testing.assert_close(out, want_out, atol=2e-4, rtol=0)
    torch.testing.assert_close(mass, want_mass, atol=1e-5, rtol=0)
    assert mass[..., 26:].abs().max() == 0  # keys after position 25 are never visible


@pytest.mark.triton
@needs_triton
def test_dispatch_override_runs_the_kernel(monkeypatch):
    monkeypatch.setenv("CONFKV_ATTENTION", "triton")
    q, kv, q_pos = make_case(1, 2, 2, 1, 32, 33, 20, torch.float16, True, seed=2, device=TRITON_DEVICE)
    assert select_backend(q) == "triton"
    out, mass = segmented_attention(q, kv, q_pos, None, False)
    assert mass is None
    want = reference_attention(q, kv, q_pos)[0]
    torch.testing.assert_close(out.float(), want.float(), atol=1e-2, rtol=0)


# ---------------------------------------------------------------- benchmark plumbing (tiny shapes; not a timing test)

TINY_BENCH = ["--lengths", "40,70", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--recent", "8",
              "--iters", "1"]


def test_bench_kernel_cli_reports_every_variant_as_json():
    import json

    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(app, ["bench", "kernel", *TINY_BENCH, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    variants = [(r["length"], r["variant"]) for r in report["rows"]]
    names = ["sdpa", "ours-fp", "ours-fp+mass", "ours-int8", "ours-int8+mass"]
    assert variants == [(t, v) for t in (40, 70) for v in names]
    if report["device"] == "cpu":
        from confkv.kernels import cpu_decode

        if cpu_decode.kernel() is not None:  # the compiled decode kernel is what runs, and the report says so
            assert report["backend"] == "cpu-kernel" and "C++ decode kernel" in report["note"]
        else:
            assert report["backend"] == "reference" and "REFERENCE" in report["note"]
    row = {(r["length"], r["variant"]): r for r in report["rows"]}
    # INT8 variant: 62 int8 tokens (1 byte + 4-byte scale per K and per V) + 8 fp32 tokens, B=1, Hkv=2, D=16, fp32 q.
    assert row[(70, "ours-int8")]["bytes_read"] == 2 * 2 * (62 * (16 + 4) + 8 * 16 * 4) + 2 * 4 * 16 * 4
    assert all(r["ms"] > 0 for r in report["rows"])


def test_bench_kernel_cli_rejects_bad_lengths():
    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(app, ["bench", "kernel", "--lengths", "1k,2k"])
    assert result.exit_code != 0 and "comma-separated integers" in result.output


@pytest.mark.triton
@needs_triton
def test_bench_runs_the_kernel_when_forced(monkeypatch):
    """The benchmark's kernel path (correctness column included) on tiny shapes under the interpreter."""
    from confkv.bench.kernel import KernelBenchConfig, run_kernel_bench, summarize

    monkeypatch.setenv("CONFKV_ATTENTION", "triton")
    cfg = KernelBenchConfig(lengths=(33,), heads=4, kv_heads=2, head_dim=16, recent=8, iters=1, warmup=0,
                            device=TRITON_DEVICE)
    report = run_kernel_bench(cfg)
    assert report["backend"] == "triton"
    errs = [r["max_abs_err"] for r in report["rows"] if r["variant"] != "sdpa"]
    assert len(errs) == 4 and max(errs) < 1e-2
    assert summarize(report)[0].startswith("T=33: int8 vs fp")


def _chunk_case(n_int8: int, seed: int) -> tuple[torch.Tensor, SegmentedKV, torch.Tensor]:
    """A cache layer during a prefill chunk: older kept keys (evicted gaps, per-head order) then the chunk's own
    L tokens at the end of the model-dtype segment, in order; q_pos = those tokens' positions."""
    gen = torch.Generator().manual_seed(seed)
    b, hkv, g, n_q, d, old = 2, 2, 3, 5, 16, 19
    q = torch.randn(b, hkv * g, n_q, d, generator=gen)
    k = torch.randn(b, hkv, old + n_q, d, generator=gen) * 1.5
    v = torch.randn(b, hkv, old + n_q, d, generator=gen)
    old_pos = torch.stack([torch.randperm(40, generator=gen)[:old] for _ in range(b * hkv)]).view(b, hkv, old)
    new_pos = torch.arange(40, 40 + n_q).expand(b, hkv, n_q)
    kv = SegmentedKV.from_dense(k, v, n_int8, torch.cat([old_pos, new_pos], dim=2))
    return q, kv, torch.arange(40, 40 + n_q).expand(b, n_q)


@pytest.mark.parametrize("n_int8", [0, 11], ids=["fp-only", "int8+fp"])
@pytest.mark.parametrize("score_budget", [1 << 20, 2 * 2 * 3 * 24 * 2], ids=["one-block", "row-blocks"])
def test_causal_tail_equals_the_position_mask(n_int8: int, score_budget: int) -> None:
    """The cache's prefill shape (`causal_tail=L`: the last L keys are the queries, causal; all else older) gives
    what the general position mask gives, in one block or in blocks of 2 queries."""
    q, kv, q_pos = _chunk_case(n_int8, seed=5)
    want_out, want_mass = naive_attention(q, kv, q_pos, 0.3)
    out, mass = reference_attention(q, kv, None, 0.3, True, score_budget=score_budget, causal_tail=q.shape[2])
    torch.testing.assert_close(out, want_out, atol=2e-5, rtol=0)
    torch.testing.assert_close(mass, want_mass, atol=1e-6, rtol=0)
    small = reference_attention(q, kv, None, 0.3, True, max_block=2, causal_tail=q.shape[2])  # falls back to q_pos
    torch.testing.assert_close(small[1], want_mass, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="causal_tail"):
        reference_attention(q, kv, q_pos, 0.3, True, causal_tail=q.shape[2])


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_channel_scaled_keys_match_the_oracle(backend: str) -> None:
    """INT8 keys with per-channel scales (`k_channel`): the reference (blockwise and row-blocked) and the Triton
    kernel read them as q * k_scale * k_channel, like the dense oracle."""
    if backend == "triton" and not HAS_TRITON:
        pytest.skip("triton is not installed (it is optional on this platform)")
    q, kv, q_pos = make_case(1, 2, 2, 3, 16, 37, 20, torch.float32, True, seed=9, device=TRITON_DEVICE)
    k_deq = kv.k_q.float() * kv.k_scale.unsqueeze(-1)
    kv = SegmentedKV.from_dense(torch.cat([k_deq, kv.k_fp], 2), torch.cat([kv.v_q.float() * kv.v_scale.unsqueeze(-1),
                                kv.v_fp], 2), 20, torch.cat([kv.pos_q, kv.pos_fp], 2), channel_keys=True)
    assert kv.k_channel is not None
    for pos in (q_pos, None):
        want = naive_attention(q, kv, pos, 0.3)
        if backend == "triton":
            out, mass = _kernel(q, kv, pos, 0.3, True, num_splits=2, block_n=16)
        else:
            out, mass = reference_attention(q, kv, pos, 0.3, True)
        torch.testing.assert_close(out, want[0].float(), atol=2e-4, rtol=0)
        torch.testing.assert_close(mass, want[1].float(), atol=1e-5, rtol=0)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="torch.compile on CPU needs a C++ compiler (inductor)")
def test_bench_kernel_times_the_compiled_call_and_checks_it_against_eager():
    """`bench kernel --compile`: a compiled row per INT8 length, its error against the eager call, and the ratio."""
    from confkv.bench.kernel import KernelBenchConfig, run_kernel_bench, summarize

    cfg = KernelBenchConfig(lengths=(40, 57), heads=4, kv_heads=2, head_dim=16, recent=8, iters=2, warmup=1,
                            device="cpu", compile=True)
    report = run_kernel_bench(cfg)
    compiled = [r for r in report["rows"] if r["variant"].endswith("compiled")]
    assert [r["length"] for r in compiled] == [40, 57] and all(r["backend"] == "inductor" for r in compiled)
    assert max(r["max_abs_err"] for r in compiled) < 1e-4
    assert "torch.compile int8+mass" in summarize(report)[0]
