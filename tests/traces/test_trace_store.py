"""Trace store round trip: what the runner writes is what readers get, and misuse fails with a clear message."""

from __future__ import annotations

import os
import sqlite3

import pytest

from confkv.cpu import cpu_kind
from traces.records import DecodeToken, StepRecord
from traces.store import TraceStore, TraceStoreError, run_key


def test_round_trip_run_episode_steps_tokens(db_path):
    with TraceStore(db_path) as store:
        run = store.start_run("qwen", "confkv", {"n_low": 128, "n_high": 512}, notes="smoke")
        ep = store.start_episode(run, "shop-7", "confkv")
        store.add_decode_tokens(
            ep,
            0,
            [
                DecodeToken(0, "click", 0.91, 128, 120, 4096),
                {"token_index": 1, "token_text": " [", "confidence": 0.4, "budget": 128},
            ],
        )
        store.add_step(
            ep,
            StepRecord(
                step=0,
                url="http://127.0.0.1:1/",
                observation="[1] link 'a'",
                observation_tokens=40,
                prefilled_tokens=300,
                total_tokens=302,
                output_tokens=2,
                raw_output="click [1]",
                action="click [1]",
                result="ok",
                kept_tokens_per_layer=[100, 200],
                kv_bytes=5000,
                prefill_ms=30.5,
                decode_ms=12.0,
                step_ms=80.0,
            ),
        )
        store.add_step(
            ep,
            step=1,
            action="stop [42]",
            prefilled_tokens=50,
            output_tokens=3,
            kv_bytes=7000,
            decode_ms=18.0,
            prefill_ms=4.0,
        )
        store.finish_episode(ep, success=True, eval_reason="exact match", full_kv_bytes=9000, peak_rss_bytes=10**9)

    with TraceStore.open_existing(db_path) as store:
        run_row = store.run(run)
        assert run_row["policy_config"] == {"n_low": 128, "n_high": 512}
        assert run_row["run_key"] == run_key("qwen", "confkv", {"n_high": 512, "n_low": 128})
        assert run_row["machine"]["cores"] == os.cpu_count()
        assert run_row["machine"]["cpu_kind"] == cpu_kind() == store.episode(ep)["cpu_kind"]
        assert run_row["notes"] == "smoke"
        episode = store.episode(ep)
        assert (episode["model"], episode["status"], episode["success"], episode["score"]) == ("qwen", "done", 1, 1.0)
        # totals are summed from the steps; peak KV defaults to the largest step's cache
        assert (episode["steps"], episode["prefilled_tokens"], episode["output_tokens"]) == (2, 350, 5)
        assert episode["decode_ms"] == pytest.approx(30.0) and episode["prefill_ms"] == pytest.approx(34.5)
        assert episode["peak_kv_bytes"] == 7000 and episode["full_kv_bytes"] == 9000
        assert episode["wall_s"] >= 0 and episode["finished"] >= episode["started"]
        steps = store.steps(ep)
        assert [s["action"] for s in steps] == ["click [1]", "stop [42]"]
        assert steps[0]["kept_tokens_per_layer"] == [100, 200] and steps[1]["kept_tokens_per_layer"] == []
        tokens = store.decode_tokens(ep, step=0)
        assert [(t["token_text"], t["confidence"], t["budget"]) for t in tokens] == [
            ("click", 0.91, 128),
            (" [", 0.4, 128),
        ]


def test_schema_is_queryable_with_foreign_keys_indexes_and_wal(db_path):
    with TraceStore(db_path) as store:
        db = store.db
        assert set(db.table_names()) >= {"runs", "episodes", "steps", "decode_tokens"}
        assert db.journal_mode == "wal"
        assert {fk.other_table for fk in db["episodes"].foreign_keys} == {"runs"}
        assert {fk.other_table for fk in db["steps"].foreign_keys} == {"episodes"}
        assert {fk.other_table for fk in db["decode_tokens"].foreign_keys} == {"episodes"}
        assert any(ix.columns == ["run_id", "task_id"] for ix in db["episodes"].indexes)
        assert "episode_overview" in db.view_names()
        # the FK is enforced, not just declared
        with pytest.raises(sqlite3.IntegrityError):
            db.execute("insert into steps (episode_id, step) values (999, 0)")
    # reopening an existing store is idempotent
    TraceStore(db_path).close()


def test_closed_episodes_reject_writes_and_duplicates_are_reported(db_path):
    with TraceStore(db_path) as store:
        ep = store.start_episode(store.start_run("m", "full"), "t")
        store.add_step(ep, step=0, action="click [1]")
        with pytest.raises(TraceStoreError, match="step 0 of episode 1 is already recorded"):
            store.add_step(ep, step=0, action="click [2]")
        store.finish_episode(ep, success=False)
        with pytest.raises(TraceStoreError, match="already done"):
            store.add_step(ep, step=1, action="click [3]")
        with pytest.raises(TraceStoreError, match="already done"):
            store.fail_episode(ep, "late error")
        with pytest.raises(TraceStoreError, match="no episode 42"):
            store.add_decode_tokens(42, 0, [DecodeToken(0, "x", 0.5, 10)])
        # a rejected write leaves nothing behind
        assert len(store.steps(ep)) == 1


def test_invalid_values_are_rejected_before_writing(db_path):
    with TraceStore(db_path) as store:
        run = store.start_run("m", "confkv")
        ep = store.start_episode(run, "t")
        with pytest.raises(ValueError, match=r"confidence must be in \[0, 1\]"):
            store.add_decode_tokens(ep, 0, [DecodeToken(0, "a", 0.5, 8), DecodeToken(1, "b", 1.5, 8)])
        assert store.decode_tokens(ep) == []
        with pytest.raises(ValueError, match="kv_bytes must be >= 0"):
            store.add_step(ep, step=0, kv_bytes=-1)
        with pytest.raises(ValueError, match="score must be in"):
            store.finish_episode(ep, success=True, score=2.0)
        with pytest.raises(ValueError, match="start one run per policy"):
            store.start_episode(run, "t2", "full")
        with pytest.raises(TraceStoreError, match="no run 77"):
            store.start_episode(77, "t")
        with pytest.raises(TypeError, match="mapping or a dataclass"):
            store.start_run("m", "confkv", ["not", "a", "mapping"])


def test_fail_episode_keeps_the_traceback_and_counts_as_failure(db_path):
    with TraceStore(db_path) as store:
        ep = store.start_episode(store.start_run("m", "full"), "t")
        try:
            raise RuntimeError("chromium died")
        except RuntimeError as exc:
            store.fail_episode(ep, exc, peak_kv_bytes=123)
        row = store.episode(ep)
        assert row["status"] == "error" and row["success"] == 0 and row["peak_kv_bytes"] == 123
        assert "Traceback" in row["error"] and "RuntimeError: chromium died" in row["error"]


def test_dataclass_policy_config_is_stored_as_json(db_path):
    from dataclasses import dataclass

    @dataclass
    class Cfg:
        n_low: int = 64
        ranker: str = "ema"

    with TraceStore(db_path) as store:
        run = store.start_run("m", "confkv", Cfg())
        assert store.run(run)["policy_config"] == {"n_low": 64, "ranker": "ema"}


def test_opening_missing_or_foreign_files_is_a_clear_error(tmp_path):
    missing = tmp_path / "none.sqlite"
    with pytest.raises(TraceStoreError, match="no trace database at .*none.sqlite"):
        TraceStore.open_existing(missing)
    assert not missing.exists()  # reading never creates a database
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(TraceStoreError, match="cannot open trace database"):
        TraceStore.open_existing(junk)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("create table x (a)").connection.close()
    with pytest.raises(TraceStoreError, match="not a confkv trace database"):
        TraceStore.open_existing(other)

