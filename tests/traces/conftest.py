"""Fixtures: a trace database filled the way the episode runner fills it (two policies, three tasks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from traces.records import DecodeToken, StepRecord
from traces.store import TraceStore

N_LOW, N_HIGH = 128, 512
TASKS = ("shop-1", "shop-2", "forum-1")


def decode_rows(confidences: list[float]) -> list[DecodeToken]:
    """Budget follows confidence like a two-level Conf-KV schedule: low confidence -> the next token gets n_high."""
    rows, budget = [], N_LOW
    for i, conf in enumerate(confidences):
        rows.append(
            DecodeToken(
                token_index=i,
                token_text=f"t{i}",
                confidence=conf,
                budget=budget,
                kept_tokens=min(budget, 100 + i),
                kv_bytes=1000 * (100 + i),
            )
        )
        budget = N_HIGH if conf < 0.5 else N_LOW
    return rows


def record_episode(store: TraceStore, run_id: int, task: str, *, success: bool, kv_scale: int, n_steps: int = 3) -> int:
    episode = store.start_episode(run_id, task)
    for step in range(n_steps):
        confidences = [0.9, 0.3, 0.95, 0.2, 0.8, 0.9][: 4 + step % 3]
        store.add_decode_tokens(episode, step, decode_rows(confidences))
        store.add_step(
            episode,
            StepRecord(
                step=step,
                url=f"http://127.0.0.1:8000/{task}/{step}",
                observation="\n".join(f"[{i}] link 'item {i}'" for i in range(30)),
                observation_tokens=300,
                prefilled_tokens=320 if step == 0 else 120,
                total_tokens=400 + 150 * step,
                output_tokens=len(confidences),
                raw_output=f"click [{step + 3}]",
                action=f"click [{step + 3}]",
                result="ok",
                parse_error=None,
                exec_error="element 99 not found" if step == 1 else None,
                kept_tokens_per_layer=[64, 128, 256],
                kv_bytes=kv_scale * (step + 1),
                prefill_ms=200.0,
                decode_ms=100.0 * len(confidences),
                step_ms=900.0,
            ),
        )
    store.finish_episode(
        episode,
        success=success,
        eval_reason="must_include matched" if success else "no answer",
        full_kv_bytes=4 * 3 * 1000,
        peak_rss_bytes=2**30,
    )
    return episode


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "runs" / "traces.sqlite"


@pytest.fixture
def populated(db_path: Path) -> dict[str, object]:
    """full succeeds on 2/3 tasks, confkv on 1/3 with a quarter of the KV bytes; returns ids by (policy, task)."""
    with TraceStore(db_path) as store:
        runs = {
            "full": store.start_run("tiny", "full", {"budget": None}, git_revision="abc", machine={"cores": 2}),
            "confkv": store.start_run(
                "tiny", "confkv", {"n_low": N_LOW, "n_high": N_HIGH}, git_revision="abc", machine={"cores": 2}
            ),
        }
        wins = {"full": {"shop-1", "shop-2"}, "confkv": {"shop-1"}}
        scale = {"full": 4000, "confkv": 1000}
        episodes = {
            (p, t): record_episode(store, runs[p], t, success=t in wins[p], kv_scale=scale[p])
            for p in runs
            for t in TASKS
        }
    return {"path": db_path, "runs": runs, "episodes": episodes, "budgets": (N_LOW, N_HIGH)}
