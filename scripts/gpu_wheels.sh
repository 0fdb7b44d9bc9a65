#!/usr/bin/env bash
# Wheels the GPU machine's image lacks (issue 39), downloaded here into .whl/ (git-ignored), for a device run to
# carry: the image has PyTorch, Triton, transformers, typer, rich, pyyaml and pytest, but not what the trace store,
# the task schema and the sites' URL helpers import (sqlite-utils, pydantic, flask). Python 3.12, x86-64, the image's
# (see /work/.library/device/KINDS.md); versions as this project's venv pins them. Usage: scripts/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
rm -rf .whl && mkdir -p .whl
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
for name in sqlite-utils sqlite-fts4 click-default-group pydantic pydantic-core annotated-types typing-inspection \
            flask itsdangerous blinker; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$name==$(version "$name")"
done
ls .whl && du -sh .whl
