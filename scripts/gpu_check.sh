#!/usr/bin/env bash
# The GPU check (issue 39), one prepared script for a CUDA machine with PyTorch and Triton (~7 min on an H100/H200):
#  1. the Triton kernel tests compiled (no interpreter), then the kernel's bandwidth against the device's copy
#     bandwidth at 1K-32K keys, FP16 and INT8 segments apart (kernel_tests.log, kernel_bench.json/.txt), and a
#     launch-config sweep at 32K (kernel_sweep.txt);
#  2-4. `python -m cli.gpu_check`: decode at Qwen2.5-7B shapes (random bf16 weights) at 4K/16K/32K for plain
#     DynamicCache + SDPA, our full and confkv; KV bytes after 4K generated tokens at Qwen2.5-32B shapes; one
#     forced-mode episode and one generate through ConfKVSession with a tiny model, device against CPU
#     (gpu_e2e.json, gpu_e2e.md).
# Writes to $OUT (or ./gpu_check_out), with run.log. Wheels the image lacks (sqlite-utils, pydantic, flask; see
# scripts/gpu_wheels.sh) are installed from .whl/ when the run carries it. Each part runs even if an earlier one
# failed; the exit status is 1 if any failed. Usage: scripts/gpu_check.sh [extra pytest args]
# From the device tool: run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=560)
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT_DIR="${OUT:-gpu_check_out}"
mkdir -p "$OUT_DIR"
unset TRITON_INTERPRET CONFKV_ATTENTION
# the forced part's CPU twin is a 2-layer model: the reference path, not a minute building the C++ kernel
export CONFKV_CPU_KERNEL=0
start=$(date +%s)

main() {
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

"$PY" - <<'PY' || { echo "[gpu_check] no CUDA torch/triton here; nothing to check"; return 2; }
import torch, triton
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print(f"[gpu_check] torch {torch.__version__} triton {triton.__version__} on {torch.cuda.get_device_name(0)}")
PY

status=0
echo "[gpu_check] 1. kernel tests (compiled, CUDA tensors)"
"$PY" -m pytest tests/confkv/test_kernels.py -m triton -q -p no:cacheprovider "$@" 2>&1 | tee "$OUT_DIR/kernel_tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "[gpu_check] 1. kernel bandwidth 1K..32K ($(( $(date +%s) - start )) s so far)"
"$PY" - "$OUT_DIR" <<'PY' 2>&1 | tee "$OUT_DIR/kernel_bench.txt"
import json, sys
from pathlib import Path

from confkv.bench.kernel import KernelBenchConfig, format_report, run_kernel_bench

cfg = KernelBenchConfig(lengths=(1024, 2048, 4096, 8192, 16384, 32768), iters=50, warmup=5)
report = run_kernel_bench(cfg)
print("\n".join(format_report(report)))
# Same at a small-model shape (Qwen2.5-0.5B-like: 14 query heads, 2 KV heads, D=64).
small = run_kernel_bench(KernelBenchConfig(lengths=(4096, 32768), heads=14, kv_heads=2, head_dim=64, iters=50))
print("\n".join(format_report(small)))
Path(sys.argv[1], "kernel_bench.json").write_text(json.dumps({"qwen2.5-7b-like": report, "qwen2.5-0.5b-like": small},
                                                             indent=2))
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "[gpu_check] 1. launch-config sweep at 32K (block_n, num_warps, num_stages), to pick the defaults"
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
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# one process per part: a device fault in one part cannot poison the CUDA context of the next; the open-ended
# generation part last (each process adds its part to gpu_e2e.json at once)
for part in decode forced generate memory; do
  echo "[gpu_check] end to end: $part ($(( $(date +%s) - start )) s so far)"
  "$PY" -m cli.gpu_check --out "$OUT_DIR" --parts "$part" --time-limit "${GEN_TIME_LIMIT:-60}" || status=1
done
echo "[gpu_check] done in $(( $(date +%s) - start )) s, status $status, results in $OUT_DIR"
return $status
}

main "$@" 2>&1 | tee "$OUT_DIR/run.log"
exit "${PIPESTATUS[0]}"
