"""Several worker processes writing one trace database at once must not lose (or duplicate) a row."""

from __future__ import annotations

import multiprocessing as mp

from traces.records import DecodeToken, StepRecord
from traces.store import TraceStore

WORKERS, EPISODES, STEPS, TOKENS = 4, 5, 4, 12


def _worker(db_path: str, worker: int, barrier) -> None:
    store = TraceStore(db_path)
    barrier.wait()  # start together so the writes really interleave
    run = store.start_run("tiny", "confkv", {"n_low": 8}, resume=True)
    for e in range(EPISODES):
        ep = store.start_episode(run, f"w{worker}-t{e}")
        for s in range(STEPS):
            store.add_decode_tokens(
                ep, s, [DecodeToken(i, f"tok{i}", (i % 10) / 10, 8 + i, 8, 64 * i) for i in range(TOKENS)]
            )
            store.add_step(ep, StepRecord(step=s, action=f"click [{s}]", kv_bytes=100 * s, prefilled_tokens=10))
        store.finish_episode(ep, success=e % 2 == 0)
    store.close()


def test_concurrent_writer_processes_lose_no_rows(db_path):
    TraceStore(db_path).close()  # schema first; workers also race on ensure_schema, which must be harmless
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    procs = [ctx.Process(target=_worker, args=(str(db_path), w, barrier)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * WORKERS

    with TraceStore.open_existing(db_path) as store:
        # start_run(resume=True) is check-then-insert in one immediate transaction: one run, not one per worker
        assert len(store.runs()) == 1
        counts = {t: store.db[t].count for t in ("episodes", "steps", "decode_tokens")}
        assert counts == {
            "episodes": WORKERS * EPISODES,
            "steps": WORKERS * EPISODES * STEPS,
            "decode_tokens": WORKERS * EPISODES * STEPS * TOKENS,
        }
        episodes = store.episodes()
        assert all(e["status"] == "done" and e["steps"] == STEPS for e in episodes)
        assert len({e["task_id"] for e in episodes}) == WORKERS * EPISODES
        summary = store.summary().policies["confkv"]
        assert summary.episodes == WORKERS * EPISODES and summary.successes == WORKERS * 3
