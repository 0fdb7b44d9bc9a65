#!/usr/bin/env bash
# The one test command (README + .ci/run): installs everything the suite needs on a fresh machine, then runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  echo "[test.sh] installing Debian chromium (real-browser tests need it)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium
fi

# The C++ CPU decode kernel (confkv.kernels.cpu_decode) builds on first use; its tests need a compiler and Python's
# headers (without them the library falls back to the PyTorch path, and those tests would only skip).
if ! command -v g++ >/dev/null 2>&1 || ! python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; then
  echo "[test.sh] installing g++ and python3-dev (the CPU decode kernel's build)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q g++ python3-dev
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,miniwob,ray]'

.venv/bin/ruff check .
export TRITON_INTERPRET=1
exec .venv/bin/python -m pytest "$@"
