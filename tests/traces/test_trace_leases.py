"""Leases: a live process's episode is never closed by another writer; a dead owner's episode is taken over; blocked
requests are stored per episode."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import time

from traces.leases import LEASE_S, LeaseKeeper, is_stale, owner_id
from traces.store import TraceStore


def _open_and_die(db_path: str, run_id: int, task: str) -> None:
    store = TraceStore(db_path)
    store.claim_episode(run_id, task)
    os._exit(3)


def test_stale_rules() -> None:
    now = time.time()
    assert not is_stale(owner_id(), now)  # this very process, fresh heartbeat
    assert is_stale(owner_id(), now - LEASE_S - 1)  # a hung owner loses its lease
    assert not is_stale("otherhost:1", now) and is_stale("otherhost:1", now - LEASE_S - 1)
    assert is_stale(None, None)  # written before leases existed
    host = owner_id().rpartition(":")[0]
    assert is_stale(f"{host}:{2**22 + 12345}", now)  # no such pid on this host


def test_a_second_writer_leaves_a_live_episode_alone(db_path) -> None:
    with TraceStore(db_path) as first, TraceStore(db_path) as second:
        run = first.start_run("m", "full")
        second.owner = "otherhost:42"  # a live process elsewhere (fresh heartbeat)
        theirs = second.claim_episode(run, "a")
        assert theirs is not None
        assert first.claim_episode(run, "a") is None  # taken: skipped, not stolen
        mine = first.start_episode(run, "a")  # an explicit start does not close the live attempt either
        second.add_step(theirs, step=0, action="click [1]")  # the old store raised TraceStoreError here
        second.finish_episode(theirs, success=True)
        assert first.episode(mine)["status"] == "running"
        assert first.claim_episode(run, "a") is None  # done now


def test_a_dead_owners_episode_is_taken_over(db_path) -> None:
    with TraceStore(db_path) as store:
        run = store.start_run("m", "full")
    proc = mp.get_context("spawn").Process(target=_open_and_die, args=(str(db_path), run, "b"))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 3
    with TraceStore(db_path) as store:
        [orphan] = store.episodes(status="running")
        mine = store.claim_episode(run, "b")
        assert mine is not None and mine != orphan["id"]
        old = store.episode(orphan["id"])
        assert old["status"] == "error" and f"rerun as episode {mine}" in old["error"]


def test_lease_keeper_refreshes_the_heartbeat(db_path) -> None:
    with TraceStore(db_path) as store:
        ep = store.start_episode(store.start_run("m", "full"), "a")
        store.conn.execute("update episodes set heartbeat = 0 where id = ?", [ep])
        store.conn.commit()
        keeper = LeaseKeeper(db_path, store.owner, interval_s=0.05)
        time.sleep(0.4)
        keeper.close()
        assert store.episode(ep)["heartbeat"] > time.time() - 5


def test_blocked_requests_are_stored_per_episode(db_path) -> None:
    with TraceStore(db_path) as store:
        run = store.start_run("m", "full")
        a, b = store.start_episode(run, "a"), store.start_episode(run, "b")
        assert store.add_blocked(a, ["http://127.0.0.1:9/x", "proxy: CONNECT 127.0.0.1:9"]) == 2
        store.add_blocked(a, ["ws://127.0.0.1:9/ws"])
        assert store.add_blocked(b, []) == 0
        store.finish_episode(a, success=False)
        assert store.blocked(a) == ["http://127.0.0.1:9/x", "proxy: CONNECT 127.0.0.1:9", "ws://127.0.0.1:9/ws"]
        assert store.blocked(b) == []


def test_an_old_database_gains_the_new_columns(db_path) -> None:
    db_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(db_path)
    conn.execute("create table episodes (id integer primary key, run_id int, task_id text, policy text, "
                 "status text, started text)")  # fmt: skip
    conn.commit()
    conn.close()
    with TraceStore(db_path) as store:
        assert {"owner", "heartbeat", "error"} <= set(store.db["episodes"].columns_dict)
        assert "blocked_requests" in store.db.table_names()
