"""A CPU prefill chunk: fused flash attention for the output, the compiled kernel or blocked BLAS for the mass,
against the PyTorch reference (their oracle) on the cache's causal-tail layout."""

from __future__ import annotations

import json

import pytest
import torch

from confkv.kernels import SegmentedKV, cpu_decode, cpu_prefill, reference_attention, segmented_attention

needs_kernel = pytest.mark.skipif(cpu_decode.kernel() is None, reason=f"no CPU kernel: {cpu_decode.build_error()}")


@needs_kernel
@pytest.mark.parametrize("compiled", [True, False], ids=["kernel", "blocked"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("n8", "nf", "n_q", "channel", "group"),
                         [(37, 70, 70, True, 3), (0, 21, 5, False, 1), (130, 2, 2, True, 4), (3, 9, 9, False, 2)])  # fmt: skip
def test_a_chunk_matches_the_reference(monkeypatch, compiled, dtype, n8, nf, n_q, channel, group):
    # keys cross the kernel's 64-key tiles, the chunk's causal tail crosses them too, and query blocks are ragged;
    # blocked: blocks of 4 query rows per head group (the last one short where L is not a multiple)
    monkeypatch.setattr(cpu_prefill, "compiled_mass", lambda: compiled)
    monkeypatch.setattr(cpu_prefill, "BLOCK_FLOATS", 4 * 2 * 2 * group * (n8 + nf))
    torch.manual_seed(n8 + nf + n_q)
    b, hkv, d = 2, 2, 16
    kv = SegmentedKV.from_dense(torch.randn(b, hkv, n8 + nf, d).to(dtype), torch.randn(b, hkv, n8 + nf, d).to(dtype),
                                n8, channel_keys=channel)  # fmt: skip
    q = torch.randn(b, hkv * group, n_q, d).to(dtype)
    assert cpu_prefill.usable(q, kv, n_q)
    want_out, want_mass = reference_attention(q, kv, None, 0.3, True, causal_tail=n_q)
    out, mass = cpu_prefill.prefill_attention(q, kv, 0.3, True)
    assert out.dtype == dtype and out.shape == want_out.shape
    # the output carries the model dtype's rounding of the probabilities (as full's SDPA does); the mass is fp32
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 2e-2}
    torch.testing.assert_close(out.float(), want_out.float(), **tol)
    torch.testing.assert_close(mass, want_mass, atol=1e-5 if dtype == torch.float32 else 2e-3, rtol=1e-3)
    torch.testing.assert_close(mass.sum(-1), torch.ones(b, hkv * group), atol=1e-4, rtol=1e-4)
    assert bool((mass > 0).all())  # each key is seen by the chunk's last query at least
    _, per_kv_head = segmented_attention(q, kv, None, 0.3, True, causal_tail=n_q, kv_head_mass=True)
    torch.testing.assert_close(per_kv_head, want_mass.view(b, hkv, group, -1).mean(dim=2),
                               atol=1e-5 if dtype == torch.float32 else 2e-3, rtol=1e-3)  # fmt: skip
    _, no_mass = cpu_prefill.prefill_attention(q, kv, 0.3, False)
    assert no_mass is None


@needs_kernel
@pytest.mark.parametrize("compiled", [True, False], ids=["kernel", "blocked"])
def test_the_last_query_sees_its_own_token_and_the_first_does_not_see_later_ones(monkeypatch, compiled):
    monkeypatch.setattr(cpu_prefill, "compiled_mass", lambda: compiled)
    # the causal tail, checked by mass: query 0 gives the chunk's later tokens exactly 0
    torch.manual_seed(3)
    k = torch.randn(1, 1, 10, 8)
    kv = SegmentedKV.from_dense(k, torch.randn(1, 1, 10, 8), 0)
    q = torch.randn(1, 1, 1, 8).expand(1, 1, 4, 8).contiguous()  # four equal queries, tail = the last 4 keys
    _, per_query = cpu_prefill.prefill_attention(q[:, :, :1].expand(1, 1, 4, 8).contiguous(), kv, 1.0, True)
    _, ref = reference_attention(q, kv, None, 1.0, True, causal_tail=4)
    torch.testing.assert_close(per_query, ref, atol=1e-6, rtol=1e-4)
    # by hand: query l sees keys 0..6+l; averaged over the 4 queries, key 9 is seen by query 3 alone
    s = q[0, 0, 0] @ k[0, 0].T
    probs = [torch.softmax(s[: 7 + i], 0) for i in range(4)]
    assert float(per_query[0, 0, 9]) == pytest.approx(float(probs[3][9]) / 4, rel=1e-4)


@needs_kernel
def test_segmented_attention_routes_chunks_to_it_unless_switched_off(monkeypatch):
    calls: list[int] = []
    real = cpu_prefill.prefill_attention
    monkeypatch.setattr(cpu_prefill, "prefill_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    kv = SegmentedKV.from_dense(torch.randn(1, 2, 12, 8), torch.randn(1, 2, 12, 8), 6)
    segmented_attention(torch.randn(1, 4, 3, 8), kv, causal_tail=3, return_mass=True, check=True)
    assert calls == [1]
    segmented_attention(torch.randn(1, 4, 3, 8), kv, q_pos=torch.tensor([[7, 8, 9]]))  # positions: the reference
    segmented_attention(torch.randn(1, 4, 1, 8), kv, causal_tail=1)  # a decode step: the decode kernel
    monkeypatch.setenv(cpu_decode.ENV, "0")
    segmented_attention(torch.randn(1, 4, 3, 8), kv, causal_tail=3)
    monkeypatch.setenv(cpu_decode.ENV, "1")
    monkeypatch.setenv("CONFKV_ATTENTION", "reference")
    segmented_attention(torch.randn(1, 4, 3, 8), kv, causal_tail=3)
    assert calls == [1]


@needs_kernel
@pytest.mark.parametrize("name", ["confkv", "h2o"])
def test_a_session_prefills_and_decodes_the_same_tokens_with_and_without_it(monkeypatch, name):
    from confkv.policies import get_policy
    from confkv.session import ConfKVSession
    from confkv.testing import tiny_model

    model, _ = tiny_model("llama")
    policy = get_policy(name, {"prefill_chunk": "16", "protect": "4"})
    policy = policy.with_values(**({"n_low": 12, "n_high": 20, "int8_after": 6} if name == "confkv" else
                                   {"budget": 20}))  # fmt: skip

    def run() -> tuple[list[int], list[int]]:
        session = ConfKVSession(model, policy)
        session.append(list(range(3, 90)))  # six chunks, evicting after each
        kept = session.cache.layers[0].positions().flatten().tolist()
        return kept, session.decode(8)

    with_kernel = run()
    monkeypatch.setenv(cpu_decode.ENV, "0")
    assert run() == with_kernel


def test_the_compiled_mass_runs_where_the_cpu_has_avx512(monkeypatch):
    # its 4 x 64 register block fits AVX-512's 32 vector registers, not AVX2's 16 (module docstring)
    cpu_prefill.compiled_mass.cache_clear()
    monkeypatch.setattr(cpu_decode, "cpu_flags", lambda: "flags : fpu sse avx2 fma avx512f avx512bw")
    assert cpu_prefill.compiled_mass()
    cpu_prefill.compiled_mass.cache_clear()
    monkeypatch.setattr(cpu_decode, "cpu_flags", lambda: "flags : fpu sse avx2 fma")
    assert not cpu_prefill.compiled_mass()
    cpu_prefill.compiled_mass.cache_clear()


@pytest.mark.parametrize("form", ["compiled", "split"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("group", "older", "n_q", "d"), [(3, 37, 70, 16), (1, 0, 5, 32), (4, 130, 2, 16),
                                                          (2, 1, 9, 48), (6, 200, 67, 128)])  # fmt: skip
def test_the_chunk_attention_is_the_masked_one(form, dtype, group, older, n_q, d):
    # split: older keys without a mask + the chunk's own block with `is_causal`, joined by log-sum-exp; compiled: one
    # online-softmax pass (key tiles of 64, query blocks of 4 rows and of 64: these shapes cross each). Both: the
    # same output and per-query log-sum-exp as one call with the causal tail as a mask, for a query as transformers
    # passes it
    if form == "compiled" and not cpu_prefill.compiled_attention(dtype, d):
        pytest.skip("the compiled kernel runs in fp32 on a CPU with AVX-512")
    attention = cpu_prefill.causal_tail_attention if form == "compiled" else cpu_prefill.split_attention
    gen = torch.Generator().manual_seed(group * 100 + older + n_q)
    b, hkv, n = 2, 2, older + n_q
    q = torch.randn(b, n_q, hkv * group, d, generator=gen).transpose(1, 2).to(dtype)  # [B, Hq, L, D], strided
    k, v = (torch.randn(b, hkv, n, d, generator=gen).to(dtype) for _ in range(2))
    visible = torch.ones(n_q, n, dtype=torch.bool)
    visible[:, older:] = torch.ones(n_q, n_q, dtype=torch.bool).tril()
    scores = (q.float() @ k.float().repeat_interleave(group, dim=1).transpose(-1, -2)) * 0.3
    want_lse = scores.masked_fill(~visible, float("-inf")).logsumexp(-1)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=0.3, enable_gqa=True)
    out, lse = attention(q, k, v, 0.3)
    assert out.dtype == dtype and out.shape == want.shape and lse.dtype == torch.float32
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(out.float(), want.float(), **tol)
    torch.testing.assert_close(lse, want_lse, atol=1e-4 if dtype == torch.float32 else 5e-2, rtol=1e-4)


def test_bench_prefill_attention_times_both_forms_and_checks_they_agree():
    from typer.testing import CliRunner

    from cli.main import app

    args = ["bench", "prefill-attention", "--chunks", "5,9", "--older", "3", "--heads", "4", "--kv-heads", "2",
            "--head-dim", "16", "--repeats", "1", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert [(r["chunk"], r["older"]) for r in report["rows"]] == [(5, 3), (9, 3)]
    compiled = cpu_prefill.compiled_attention(torch.float32, 16)
    for row in report["rows"]:
        assert row["masked_ms"] > 0 and row["split_ms"] > 0 and row["split_speedup"] > 0
        assert row["split_max_abs_diff"] < 1e-5
        assert ("kernel_ms" in row) == compiled and row.get("kernel_max_abs_diff", 0.0) < 1e-5
    bad = CliRunner().invoke(app, ["bench", "prefill-attention", "--heads", "5", "--kv-heads", "2"])
    assert bad.exit_code != 0 and "--kv-heads" in bad.output
