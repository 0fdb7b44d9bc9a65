"""Prefill chunk rows, and moving a finished episode between databases (what the Ray driver does)."""

from __future__ import annotations

import pytest

from tests.traces.conftest import record_episode
from traces.records import PrefillChunk
from traces.store import TraceStore, TraceStoreError
from traces.transfer import export_episode, import_episode


def test_prefill_chunks_round_trip_and_validation(db_path) -> None:
    with TraceStore(db_path) as store:
        run = store.start_run("tiny", "confkv", {})
        ep = store.start_episode(run, "t")
        assert store.add_prefill_chunks(ep, 0, [PrefillChunk(0, 256, 0.4, 512, 256, 10), {"chunk_index": 1,
                                        "tokens": 10, "confidence": 0.9, "budget": None}]) == 2  # fmt: skip
        for bad, message in ((PrefillChunk(2, 0, 0.5), "at least one token"), (PrefillChunk(2, 5, 1.5), "confidence"),
                             (PrefillChunk(-1, 5, 0.5), "chunk_index")):  # fmt: skip
            with pytest.raises(ValueError, match=message):
                store.add_prefill_chunks(ep, 1, [bad])
        with pytest.raises(TraceStoreError, match="already recorded"):
            store.add_prefill_chunks(ep, 0, [PrefillChunk(0, 1, 0.5)])
        rows = store.prefill_chunks(ep)
        assert [(r["chunk_index"], r["tokens"], r["budget"]) for r in rows] == [(0, 256, 512), (1, 10, None)]


def test_an_exported_episode_arrives_whole_under_the_drivers_run(tmp_path) -> None:
    with TraceStore(tmp_path / "scratch.sqlite") as scratch:
        run = scratch.start_run("tiny", "confkv", {"x": 1})
        open_ep = scratch.start_episode(run, "still-running")
        with pytest.raises(TraceStoreError, match="still running"):
            export_episode(scratch, open_ep)
        scratch.fail_episode(open_ep, "stopped")
        done = record_episode(scratch, run, "shop-2", success=True, kv_scale=1000)
        payload = export_episode(scratch, done)
        source_steps, source_tokens = scratch.steps(done), scratch.decode_tokens(done)
        chunked = scratch.start_episode(run, "shop-3")
        scratch.add_prefill_chunks(chunked, 0, [PrefillChunk(0, 300, 0.5, 512, 300, 99), PrefillChunk(1, 7, 0.8)])
        scratch.add_step(chunked, step=0, action="click [1]")
        scratch.finish_episode(chunked, success=False)
        chunked_payload = export_episode(scratch, chunked)
    with TraceStore(tmp_path / "main.sqlite") as main:
        other = main.start_run("tiny", "full", {})
        target = main.start_run("tiny", "confkv", {"x": 1})
        with pytest.raises(ValueError, match="for policy 'full'"):
            import_episode(main, other, payload)
        new_id = import_episode(main, target, payload)
        ep_row = main.episode(new_id)
        assert ep_row["run_id"] == target and ep_row["task_id"] == "shop-2" and ep_row["success"] == 1
        assert ep_row["started"] == payload["episodes"][0]["started"]  # the worker's times, not the import's
        strip = ("episode_id",)
        assert [{k: v for k, v in r.items() if k not in strip} for r in main.steps(new_id)] == \
            [{k: v for k, v in r.items() if k not in strip} for r in source_steps]  # fmt: skip
        assert len(main.decode_tokens(new_id)) == len(source_tokens) > 0
        chunked_id = import_episode(main, target, chunked_payload)
        assert [r["tokens"] for r in main.prefill_chunks(chunked_id)] == [300, 7]
        assert main.finished_tasks(target) == {"shop-2", "shop-3"}
