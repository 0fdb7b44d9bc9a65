"""SQLite trace store: what every episode did, step by step and token by token, and what memory it used.

Several eval worker processes write to one file at once, so every write is a short `BEGIN IMMEDIATE` transaction
(the writer takes the lock up front, so SQLite's busy timeout applies instead of failing on a lock upgrade) in WAL
mode (readers never block writers).  Lifecycle the episode runner follows:

    store = TraceStore("runs/traces.sqlite")
    run_id = store.start_run(model, "confkv", asdict(policy_config), resume=True)   # one run per policy
    for task in tasks:
        if task.id in store.finished_tasks(run_id): continue                          # resume after a crash
        ep = store.start_episode(run_id, task.id)
        store.add_decode_tokens(ep, step, [DecodeToken(...), ...]); store.add_step(ep, StepRecord(step=..., ...))
        store.finish_episode(ep, success=..., peak_kv_bytes=..., ...)   # or store.fail_episode(ep, exc)
    print(store.summary(run_ids=[...]).to_json())
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlite_utils

from confkv.cpu import cpu_kind
from traces import DEFAULT_DB_PATH
from traces.errors import TraceStoreError
from traces.leases import is_stale, owner_id
from traces.machine import git_revision as current_git_revision
from traces.machine import machine_info
from traces.queries import TraceQueries
from traces.records import DecodeToken, PrefillChunk, StepRecord
from traces.schema import ensure_schema

__all__ = ["TraceStore", "TraceStoreError", "now_iso", "run_key"]

_AUTO: Any = object()  # sentinel: "detect it" (git revision, machine info)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def run_key(model: str, policy: str, policy_config: Mapping[str, Any] | None) -> str:
    """Stable id of an experiment: same model, policy and config -> same key, whatever the dict order."""
    payload = json.dumps({"model": model, "policy": policy, "config": policy_config or {}}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


_MISSING = object()


def _older_run(db: Any, model: str, policy: str, config: Mapping[str, Any], defaults: Mapping[str, Any]) -> int | None:
    """The latest run of (model, policy) whose config equals `config` except for keys it lacks that are at their
    defaults in `config` (the run was recorded before those keys existed)."""
    want = json.loads(json.dumps(config, default=str))  # compare as stored: JSON round trip (tuples -> lists)
    base = json.loads(json.dumps(dict(defaults), default=str))
    rows = db.execute("select id, policy_config from runs where model = ? and policy = ? order by id desc",
                      [model, policy]).fetchall()
    for run_id, stored_json in rows:
        stored = json.loads(stored_json or "{}")
        if not set(stored) <= set(want):
            continue
        if all(stored[k] == want[k] for k in stored) and all(
            base.get(k, _MISSING) == want[k] for k in set(want) - set(stored)
        ):
            return int(run_id)
    return None


class TraceStore(TraceQueries):
    """Read and write one trace database.  One instance per process (sqlite connections are not fork-safe)."""

    def __init__(self, path: str | Path = DEFAULT_DB_PATH, *, create: bool = True, busy_timeout_s: float = 60.0):
        self.path = Path(path)
        self.owner = owner_id()
        self.cpu_kind = cpu_kind()
        if not create and not self.path.is_file():
            raise TraceStoreError(
                f"no trace database at {self.path} (run `confkv-agent run TASK.yaml` or `confkv-agent eval` to "
                "create one, or pass --db PATH)"
            )
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(str(self.path), timeout=busy_timeout_s)
            self.db = sqlite_utils.Database(self.conn)
            self.conn.execute("PRAGMA foreign_keys = ON")
            if create:
                self.db.enable_wal()
                self.conn.execute("PRAGMA synchronous = NORMAL")  # durable across process crashes in WAL mode
                with self._write():
                    ensure_schema(self.db)
            else:
                missing = {"runs", "episodes", "steps", "decode_tokens"} - set(self.db.table_names())
                if missing:
                    raise TraceStoreError(
                        f"{self.path} is not a confkv trace database (missing tables: {sorted(missing)})"
                    )
        except sqlite3.DatabaseError as exc:
            raise TraceStoreError(f"cannot open trace database {self.path}: {exc}") from exc

    @classmethod
    def open_existing(cls, path: str | Path = DEFAULT_DB_PATH) -> TraceStore:
        """Open for reading/annotating without creating anything; a missing file is a TraceStoreError."""
        return cls(path, create=False)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite_utils.Database]:
        """One immediate write transaction: waits (busy timeout) for other writers instead of failing."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.conn.rollback()
            raise
        self.conn.execute("COMMIT")

    # ---------------------------------------------------------------- runs

    def start_run(
        self,
        model: str,
        policy: str,
        policy_config: Mapping[str, Any] | Any | None = None,
        *,
        notes: str | None = None,
        resume: bool = False,
        defaults: Mapping[str, Any] | None = None,
        mode: str = "free",
        git_revision: str | None = _AUTO,
        machine: Mapping[str, Any] | None = _AUTO,
    ) -> int:
        """Record a run (one model with one policy configuration) and return its id.

        `policy_config` is a mapping or a dataclass (e.g. `PolicyConfig`).  With `resume=True` the latest run with
        the same model, policy and config is returned instead of a new one, so a re-launched eval adds its
        episodes to the run it interrupted and `finished_tasks(run_id)` tells it what to skip. `defaults` (config key
        -> default value) lets a run recorded before a config key existed be resumed: it matches when it differs
        only by keys it lacks whose new value is that default (a new policy field must not restart a long eval).
        """
        if not model or not policy:
            raise ValueError("start_run needs a model name and a policy name")
        if dataclasses.is_dataclass(policy_config) and not isinstance(policy_config, type):
            policy_config = dataclasses.asdict(policy_config)
        if policy_config is not None and not isinstance(policy_config, Mapping):
            raise TypeError(f"policy_config must be a mapping or a dataclass, got {type(policy_config).__name__}")
        config = dict(policy_config or {})
        key = run_key(model, policy, config)
        # provenance is gathered before taking the write lock: `git status` must not stall other writers
        revision = current_git_revision() if git_revision is _AUTO else git_revision
        machine_json = json.dumps(machine_info() if machine is _AUTO else machine, default=str)
        with self._write() as db:
            if resume:
                row = db.execute("select id from runs where run_key = ? order by id desc limit 1", [key]).fetchone()
                if row:
                    return int(row[0])
                older = _older_run(db, model, policy, config, defaults) if defaults else None
                if older is not None:
                    return older
            return (
                db["runs"]
                .insert(
                    {
                        "created": now_iso(),
                        "run_key": key,
                        "model": model,
                        "policy": policy,
                        "policy_config": json.dumps(config, sort_keys=True, default=str),
                        "git_revision": revision,
                        "machine": machine_json,
                        "notes": notes,
                        "mode": mode,
                    }
                )
                .last_pk
            )

    # ---------------------------------------------------------------- episodes

    def start_episode(self, run_id: int, task_id: str, policy: str | None = None) -> int:
        """Open an episode (status 'running', owned by this process) and return its id.

        Earlier attempts at the same task in the same run that are still 'running' but whose owner is gone (a
        crashed or killed process, see `traces.leases`) are closed as 'error', so listings and summaries show no
        phantom live episode. A live attempt of another process is left alone.
        """
        with self._write():
            return self._open_episode(run_id, task_id, policy)

    def claim_episode(self, run_id: int, task_id: str, policy: str | None = None) -> int | None:
        """Atomically take a task for this process: a new 'running' episode id, or None when the task is already
        done in this run or another live process is running it. What cooperating `eval` processes call."""
        with self._write() as db:
            rows = db.execute("select status, owner, heartbeat from episodes where run_id = ? and task_id = ? "
                              "and status in ('done', 'running')", [run_id, str(task_id)]).fetchall()  # fmt: skip
            if any(st == "done" or not is_stale(owner, beat) for st, owner, beat in rows):
                return None
            return self._open_episode(run_id, task_id, policy)

    def _open_episode(self, run_id: int, task_id: str, policy: str | None) -> int:
        db = self.db
        row = db.execute("select policy from runs where id = ?", [run_id]).fetchone()
        if row is None:
            raise TraceStoreError(f"no run {run_id} in {self.path}; call start_run first")
        if policy is not None and policy != row[0]:
            raise ValueError(f"run {run_id} is for policy {row[0]!r}, not {policy!r}: start one run per policy")
        stale = [i for i, owner, beat in db.execute(
            "select id, owner, heartbeat from episodes where run_id = ? and task_id = ? and status = 'running'",
            [run_id, str(task_id)]) if is_stale(owner, beat)]  # fmt: skip
        episode_id = int(db["episodes"].insert({
            "run_id": run_id, "task_id": str(task_id), "policy": row[0], "status": "running", "started": now_iso(),
            "owner": self.owner, "heartbeat": time.time(), "cpu_kind": self.cpu_kind,
        }).last_pk)  # fmt: skip
        for old in stale:
            db.execute(
                "update episodes set status = 'error', success = 0, finished = ?, "
                "error = 'interrupted: left running by a process that is gone; rerun as episode ' || ? where id = ?",
                [now_iso(), episode_id, old],
            )
        return episode_id

    def add_step(self, episode_id: int, record: StepRecord | None = None, **fields: Any) -> None:
        """Record one step, as a `StepRecord` or as its fields (`add_step(ep, step=0, action="click [3]")`)."""
        if record is None:
            record = StepRecord(**fields)
        elif fields:
            raise TypeError("pass either a StepRecord or keyword fields, not both")
        row = record.to_row(episode_id)
        with self._write() as db:
            self._require_running(episode_id)
            try:
                db["steps"].insert(row)
            except sqlite3.IntegrityError as exc:
                raise TraceStoreError(f"step {record.step} of episode {episode_id} is already recorded") from exc

    def add_decode_tokens(self, episode_id: int, step: int, rows: Iterable[DecodeToken | Mapping[str, Any]]) -> int:
        """Record the decoding tokens of one step (confidence, budget, cache size); returns how many."""
        records = [r if isinstance(r, DecodeToken) else DecodeToken(**r) for r in rows]
        return self._add_step_rows("decode_tokens", "decode tokens", episode_id, step, records)

    def add_prefill_chunks(self, episode_id: int, step: int, rows: Iterable[PrefillChunk | Mapping[str, Any]]) -> int:
        """Record the prefill chunks of one step (tokens, confidence, budget, cache size); returns how many."""
        records = [r if isinstance(r, PrefillChunk) else PrefillChunk(**r) for r in rows]
        return self._add_step_rows("prefill_chunks", "prefill chunks", episode_id, step, records)

    def _add_step_rows(self, table: str, what: str, episode_id: int, step: int, records: list[Any]) -> int:
        """Insert one step's per-token or per-chunk rows while the episode runs; a second insert is an error."""
        table_rows = [r.to_row(episode_id, step) for r in records]
        with self._write() as db:
            self._require_running(episode_id)
            try:
                db[table].insert_all(table_rows)
            except sqlite3.IntegrityError as exc:
                raise TraceStoreError(f"{what} of step {step}, episode {episode_id} already recorded") from exc
        return len(table_rows)

    def finish_episode(
        self,
        episode_id: int,
        *,
        success: bool,
        score: float | None = None,
        eval_reason: str | None = None,
        peak_kv_bytes: int | None = None,
        full_kv_bytes: int | None = None,
        peak_rss_bytes: int | None = None,
        peak_cuda_bytes: int | None = None,
        gate_open_rate: float | None = None,
        wall_s: float | None = None,
    ) -> None:
        """Close an episode as evaluated.  Step totals are summed from its `steps` rows; `peak_kv_bytes` defaults
        to the largest per-step `kv_bytes` and `wall_s` to the time since `start_episode`."""
        if score is not None and not 0.0 <= score <= 1.0:
            raise ValueError(f"score must be in [0, 1], got {score}")
        self._close(
            episode_id,
            "done",
            success=int(bool(success)),
            score=float(success) if score is None else float(score),
            eval_reason=eval_reason,
            peak_kv_bytes=peak_kv_bytes,
            full_kv_bytes=full_kv_bytes,
            peak_rss_bytes=peak_rss_bytes,
            peak_cuda_bytes=peak_cuda_bytes,
            gate_open_rate=gate_open_rate,
            wall_s=wall_s,
        )

    def fail_episode(
        self,
        episode_id: int,
        error: str | BaseException,
        *,
        peak_kv_bytes: int | None = None,
        full_kv_bytes: int | None = None,
        peak_rss_bytes: int | None = None,
        peak_cuda_bytes: int | None = None,
        gate_open_rate: float | None = None,
        wall_s: float | None = None,
    ) -> None:
        """Close an episode that raised.  It counts as a failure in summaries, and `finished_tasks` does not list
        it unless asked to, so a resumed eval retries it (most errors are a crashed browser or a Ctrl-C)."""
        if isinstance(error, BaseException):
            error = "".join(traceback.format_exception(type(error), error, error.__traceback__)).strip()
        self._close(
            episode_id,
            "error",
            success=0,
            score=0.0,
            error=str(error),
            peak_kv_bytes=peak_kv_bytes,
            full_kv_bytes=full_kv_bytes,
            peak_rss_bytes=peak_rss_bytes,
            peak_cuda_bytes=peak_cuda_bytes,
            gate_open_rate=gate_open_rate,
            wall_s=wall_s,
        )

    def _close(self, episode_id: int, status: str, **fields: Any) -> None:
        with self._write() as db:
            started = self._require_running(episode_id)
            totals = db.execute(
                "select count(*), sum(prefilled_tokens), sum(output_tokens), sum(decode_ms), sum(prefill_ms), "
                "max(kv_bytes) from steps where episode_id = ?",
                [episode_id],
            ).fetchone()
            finished = now_iso()
            if fields.get("peak_kv_bytes") is None:
                fields["peak_kv_bytes"] = totals[5]
            if fields.get("wall_s") is None:
                elapsed = datetime.fromisoformat(finished) - datetime.fromisoformat(started)
                fields["wall_s"] = elapsed.total_seconds()
            fields.update(
                status=status,
                finished=finished,
                steps=totals[0],
                prefilled_tokens=totals[1],
                output_tokens=totals[2],
                decode_ms=totals[3],
                prefill_ms=totals[4],
            )
            db["episodes"].update(episode_id, fields)

    def _require_running(self, episode_id: int) -> str:
        """The episode's start time; raises if it does not exist or is already closed."""
        row = self.conn.execute("select status, started from episodes where id = ?", [episode_id]).fetchone()
        if row is None:
            raise TraceStoreError(f"no episode {episode_id} in {self.path}")
        if row[0] != "running":
            raise TraceStoreError(f"episode {episode_id} is already {row[0]}; it cannot be changed")
        self.conn.execute("update episodes set heartbeat = ? where id = ?", [time.time(), episode_id])
        return row[1]

    # ---------------------------------------------------------------- confinement

    def add_blocked(self, episode_id: int, items: Iterable[str]) -> int:
        """Record what the browser confinement refused during an episode (any status); returns how many."""
        rows = [str(x)[:2000] for x in items]
        if not rows:
            return 0
        with self._write() as db:
            start = db.execute("select count(*) from blocked_requests where episode_id = ?", [episode_id]).fetchone()[0]
            db["blocked_requests"].insert_all(
                {"episode_id": episode_id, "seq": start + i, "what": what} for i, what in enumerate(rows)
            )
        return len(rows)

    # ---------------------------------------------------------------- reading
