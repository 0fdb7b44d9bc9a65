"""scripts/frontier_resume.sh with a stand-in for Python: what it hands `eval`, and how it ends on each exit status.
The stand-in answers `traces forced-plan --commands` with a plan and exits from `eval` with a chosen status."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "frontier_resume.sh"
FAKE = """#!/usr/bin/env bash
echo "$*" >> "{calls}"
case "$*" in
  *"traces forced-plan"*) echo "fp32 tasks/shopping_001.yaml"; echo "bf16 tasks/shopping_002.yaml" ;;
  *" eval "*) exit {status} ;;
esac
"""


def _run(tmp_path: Path, status: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    calls, fake = tmp_path / "calls.txt", tmp_path / "python"
    fake.write_text(FAKE.format(calls=calls, status=status))
    fake.chmod(0o755)
    db = tmp_path / "f.sqlite"
    db.write_bytes(b"")  # present: the script restores a snapshot only when it is missing
    env = {**os.environ, "PYTHON": str(fake), "DB": str(db), "DTYPE": "fp32"}
    done = subprocess.run(["bash", str(SCRIPT), "--rebase"], env=env, capture_output=True, text=True, timeout=60)
    return done, calls.read_text().splitlines()


@pytest.mark.parametrize(("status", "code", "evals"), [(0, 0, 1), (75, 75, 1), (1, 1, 3)])
def test_the_loop_ends_on_success_and_on_a_drain_and_fails_after_three_errors(tmp_path, status, code, evals):
    done, calls = _run(tmp_path, status)
    assert done.returncode == code, done.stderr
    runs = [c for c in calls if c.startswith("-m cli eval ")]
    assert len(runs) == evals
    assert runs[0].split(" --mode")[0] == "-m cli eval tasks/shopping_001.yaml"  # only the tasks at $DTYPE
    assert "--rebase" in calls[0] and "--dtype fp32" in runs[0]
    assert ("drained (SIGUSR1)" in done.stderr) == (status == 75)
    assert ("plan done" in done.stderr) == (status == 0) and ("failed three times" in done.stderr) == (status == 1)


def test_an_empty_plan_ends_at_once(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/usr/bin/env bash\ncase \"$*\" in *\" eval \"*) exit 9 ;; esac\n")  # plans nothing
    fake.chmod(0o755)
    (tmp_path / "f.sqlite").write_bytes(b"")
    env = {**os.environ, "PYTHON": str(fake), "DB": str(tmp_path / "f.sqlite"), "DTYPE": "fp32"}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "plan done" in done.stderr, done.stderr
