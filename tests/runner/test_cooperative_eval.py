"""Two real `eval` processes on one trace database split the work: every episode runs exactly once, neither
crashes (the old store closed the other's live episode as an error and the first died with a TraceStoreError)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from traces.store import TraceStore

pytestmark = [pytest.mark.browser, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
TASKS = [ROOT / "tasks" / f"shopping_00{i}.yaml" for i in range(1, 7)]


def test_two_eval_processes_run_every_episode_exactly_once(tmp_path):
    db = tmp_path / "shared.sqlite"
    TraceStore(db).close()
    cmd = [sys.executable, "-m", "cli.main", "eval", *map(str, TASKS), "--policies", "scripted", "--db", str(db)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]  # fmt: skip
    outputs = [p.communicate(timeout=400) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-2000:]
        assert "Traceback" not in err
    with TraceStore.open_existing(db) as store:
        episodes = store.episodes()
    print(f"\nowners: {sorted({e['owner'] for e in episodes})}; episodes: {len(episodes)}")
    assert sorted(e["task_id"] for e in episodes) == [str(i) for i in range(1, 7)]  # each task exactly once
    assert all(e["status"] == "done" and e["success"] for e in episodes)
