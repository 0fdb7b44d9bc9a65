"""The compiled CPU decode kernel against the PyTorch reference (its oracle), and its fallbacks."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from confkv.kernels import SegmentedKV, cpu_decode, reference_attention, segmented_attention

needs_kernel = pytest.mark.skipif(cpu_decode.kernel() is None, reason=f"no CPU kernel: {cpu_decode.build_error()}")


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("n8", "nf", "channel", "group"), [(37, 9, True, 3), (0, 21, False, 1), (16, 0, True, 4),
                                                            (50, 3, False, 2)])  # fmt: skip
def test_kernel_matches_the_reference(dtype, n8, nf, channel, group):
    torch.manual_seed(n8 + nf)
    b, hkv, d = 2, 2, 16
    k = torch.randn(b, hkv, n8 + nf, d).to(dtype)
    v = torch.randn(b, hkv, n8 + nf, d).to(dtype)
    kv = SegmentedKV.from_dense(k, v, n8, channel_keys=channel)
    q = torch.randn(b, hkv * group, 1, d).to(dtype)
    assert cpu_decode.usable(q, kv)
    want_out, want_mass = reference_attention(q, kv, None, 0.3, True)
    out, mass = cpu_decode.decode_attention(q, kv, 0.3, True)
    assert out.dtype == dtype and out.shape == want_out.shape
    torch.testing.assert_close(out.float(), want_out.float(), atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=1e-3)
    torch.testing.assert_close(mass, want_mass, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(mass.sum(-1), torch.ones(b, hkv * group))
    _, per_kv_head = segmented_attention(q, kv, None, 0.3, True, kv_head_mass=True)  # the kernel reduces the group
    torch.testing.assert_close(per_kv_head, want_mass.view(b, hkv, group, -1).mean(dim=2), atol=1e-6, rtol=1e-4)
    _, ref_kv_head = segmented_attention(torch.randn(b, hkv * group, 2, d).to(dtype), kv, None, 0.3, True,
                                         kv_head_mass=True)  # two queries: the reference, reduced after  # fmt: skip
    assert ref_kv_head.shape == (b, hkv, n8 + nf)


@needs_kernel
def test_segmented_attention_routes_decode_to_the_kernel_and_the_rest_to_the_reference(monkeypatch):
    calls: list[int] = []
    real = cpu_decode.decode_attention
    monkeypatch.setattr(cpu_decode, "decode_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    k = torch.randn(1, 2, 12, 8)
    kv = SegmentedKV.from_dense(k, k.clone(), 6)
    segmented_attention(torch.randn(1, 4, 1, 8), kv, causal_tail=1, return_mass=True, check=True)
    assert calls == [1]
    segmented_attention(torch.randn(1, 4, 3, 8), kv, causal_tail=3)  # a chunk: the reference
    segmented_attention(torch.randn(1, 4, 1, 8), kv, q_pos=torch.tensor([[5]]))  # positions: the reference
    assert calls == [1]
    monkeypatch.setenv("CONFKV_ATTENTION", "reference")
    segmented_attention(torch.randn(1, 4, 1, 8), kv)
    monkeypatch.setenv("CONFKV_ATTENTION", "")
    monkeypatch.setenv(cpu_decode.ENV, "0")
    segmented_attention(torch.randn(1, 4, 1, 8), kv)
    assert calls == [1]


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None, reason="no C++ compiler on PATH")
def test_the_kernels_build_where_there_is_a_compiler():
    # the fallback must not hide a broken kernel source: where a compiler is (scripts/test.sh installs one), it builds
    assert cpu_decode.kernel() is not None, cpu_decode.build_error()


def test_a_missing_compiler_falls_back_with_the_reason(monkeypatch):
    monkeypatch.setattr(cpu_decode.shutil, "which", lambda _name: None)
    monkeypatch.setattr(cpu_decode, "_ERROR", [])
    cpu_decode._built.cache_clear()
    try:
        assert cpu_decode.kernel() is None and "no C++ compiler" in cpu_decode.build_error()
        k = torch.randn(1, 2, 5, 8)
        kv = SegmentedKV.from_dense(k, k.clone(), 2)
        q = torch.randn(1, 2, 1, 8)
        assert not cpu_decode.usable(q, kv)
        out, _ = segmented_attention(q, kv)  # the reference still answers
        torch.testing.assert_close(out, reference_attention(q, kv)[0])
    finally:
        cpu_decode._built.cache_clear()


@needs_kernel
def test_kernel_reads_capacity_strided_views_and_a_strided_query():
    """The cache's stores are preallocated buffers sliced along the token axis; a query may come transposed."""
    torch.manual_seed(1)
    b, hkv, g, d, n8, nf, cap = 1, 2, 2, 8, 7, 5, 16
    full = SegmentedKV.from_dense(torch.randn(b, hkv, n8 + nf, d), torch.randn(b, hkv, n8 + nf, d), n8,
                                  channel_keys=True)  # fmt: skip

    def strided(t: torch.Tensor) -> torch.Tensor:  # the same values inside a bigger buffer
        buf = torch.zeros(*t.shape[:2], cap, *t.shape[3:], dtype=t.dtype)
        buf[:, :, : t.shape[2]] = t
        return buf[:, :, : t.shape[2]]

    kv = SegmentedKV(strided(full.k_q), strided(full.v_q), strided(full.k_scale[..., None])[..., 0],
                     strided(full.v_scale[..., None])[..., 0], strided(full.k_fp), strided(full.v_fp),
                     k_channel=full.k_channel)  # fmt: skip
    assert not kv.k_q.is_contiguous() and not kv.k_scale.is_contiguous()
    q = torch.randn(b, 1, hkv * g, d).transpose(1, 2)  # [B, Hq, 1, D] as attention modules produce it
    want, want_mass = reference_attention(q, full, None, None, True)
    got, got_mass = segmented_attention(q, kv, None, None, True, check=False)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got_mass, want_mass, atol=1e-6, rtol=1e-4)


@needs_kernel
def test_a_session_decodes_the_same_tokens_with_and_without_the_kernel(monkeypatch):
    from confkv.policies import get_policy
    from confkv.session import ConfKVSession
    from confkv.testing import tiny_model

    model, _ = tiny_model("llama")
    policy = get_policy("confkv", {"n_low": "12", "n_high": "20", "int8_after": "6", "protect": "4", "slack": "2",
                                   "prefill_chunk": "16"})  # fmt: skip

    def run() -> list[int]:
        session = ConfKVSession(model, policy)
        session.append(list(range(3, 40)))
        return session.decode(12)

    with_kernel = run()
    monkeypatch.setenv(cpu_decode.ENV, "0")
    assert run() == with_kernel


def test_threads_asking_first_at_once_build_once(monkeypatch):
    import threading
    import time

    builds: list[int] = []
    # a slow build attempt (no compiler found after 0.2 s): without the lock every thread would start its own
    monkeypatch.setattr(cpu_decode.shutil, "which", lambda _name: builds.append(1) or time.sleep(0.2) or None)
    cpu_decode._built.cache_clear()
    try:
        threads = [threading.Thread(target=cpu_decode.kernel) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert builds == [1]
    finally:
        monkeypatch.undo()
        cpu_decode._built.cache_clear()
