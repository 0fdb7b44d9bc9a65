#!/usr/bin/env bash
# Decode-attention kernel check for a CUDA machine (issue 4): compiled Triton kernel tests (no interpreter), then the
# benchmark at 1K..32K. Writes kernel_tests.log, kernel_bench.json and kernel_bench.txt to $OUT (or ./gpu_check_out).
# Uses the machine's own python3 (it must have CUDA torch + triton; pytest and typer are not needed for the bench).
# Expected wall time on an H200: ~1-3 min (mostly Triton compiles). Usage: scripts/gpu_check.sh [extra pytest args]
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT_DIR="${OUT:-gpu_check_out}"
mkdir -p "$OUT_DIR"
unset TRITON_INTERPRET CONFKV_ATTENTION
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

"$PY" - <<'PY' || { echo "[gpu_check] no CUDA torch/triton here; nothing to check"; exit 2; }
import torch, triton
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print(f"[gpu_check] torch {torch.__version__} triton {triton.__version__} on {torch.cuda.get_device_name(0)}")
PY

status=0
echo "[gpu_check] kernel tests (compiled, CUDA tensors)"
"$PY" -m pytest tests/confkv/test_kernels.py -m triton -q -p no:cacheprovider "$@" 2>&1 | tee "$OUT_DIR/kernel_tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "[gpu_check] benchmark 1K..32K"
"$PY" - "$OUT_DIR" <<'PY' 2>&1 | tee "$OUT_DIR/kernel_bench.txt"
import json, sys
from pathlib import Path

from confkv.bench.kernel import KernelBenchConfig, format_report, run_kernel_bench

cfg = KernelBenchConfig(lengths=(1024, 2048, 4096, 8192, 16384, 32768), iters=50, warmup=5)
report = run_kernel_bench(cfg)
Path(sys.argv[1], "kernel_bench.json").write_text(json.dumps(report, indent=2))
print("\n".join(format_report(report)))
# Same at a small-model shape (Qwen2.5-0.5B-like: 14 query heads, 2 KV heads, D=64).
small = run_kernel_bench(KernelBenchConfig(lengths=(4096, 32768), heads=14, kv_heads=2, head_dim=64, iters=50))
Path(sys.argv[1], "kernel_bench_small.json").write_text(json.dumps(small, indent=2))
print("\n".join(format_report(small)))
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "[gpu_check] launch-config sweep at 32K (block_n, num_warps, num_stages), to pick the defaults"
"$PY" - <<'PY' 2>&1 | tee "$OUT_DIR/kernel_sweep.txt"
import torch
from triton.testing import do_bench

from confkv.kernels import SegmentedKV
from confkv.kernels.triton_decode import triton_attention

t, dev = 32768, "cuda"
q = torch.randn(1, 32, 1, 128, device=dev, dtype=torch.float16)
k, v = (torch.randn(1, 8, t, 128, device=dev, dtype=torch.float16) for _ in range(2))
for name, n_int8 in (("fp", 0), ("int8", t - 128)):
    kv = SegmentedKV.from_dense(k, v, n_int8)
    for bn, nw, ns in ((32, 4, 2), (64, 4, 2), (64, 8, 2), (32, 8, 3), (16, 4, 2), (64, 4, 3), (128, 8, 2)):
        for mass in (False, True):
            try:
                ms = do_bench(lambda: triton_attention(q, kv, None, None, mass, block_n=bn, num_warps=nw, num_stages=ns))
                print(f"{name:5} block_n={bn:4} warps={nw} stages={ns} mass={mass!s:5} {ms * 1e3:8.1f} us")
            except Exception as exc:  # a config that does not compile/fit is reported, not fatal
                print(f"{name:5} block_n={bn:4} warps={nw} stages={ns} mass={mass!s:5} FAILED {type(exc).__name__}: {exc}")
PY
echo "[gpu_check] done, status $status, results in $OUT_DIR"
exit $status
