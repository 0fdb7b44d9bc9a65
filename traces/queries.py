"""The read side of the trace store: runs, episodes, their rows, resume keys and summaries.

Why apart from `traces.store`: reading never takes the write lock and shares nothing with the episode lifecycle;
`TraceStore` inherits these queries, so callers keep one object.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from traces.errors import TraceStoreError
from traces.summary import TraceSummary, final_attempts, summarize

EPISODE_SELECT = "select e.*, r.model, coalesce(r.mode, 'free') as mode from episodes e join runs r on r.id = e.run_id"


class TraceQueries:
    """Queries over `self.db` (sqlite_utils) / `self.conn` (sqlite3) / `self.path`, mixed into `TraceStore`."""

    def run(self, run_id: int) -> dict[str, Any]:
        rows = list(self.db.query("select * from runs where id = ?", [run_id]))
        if not rows:
            raise TraceStoreError(f"no run {run_id} in {self.path}")
        return _decode_run(rows[0])

    def runs(self) -> list[dict[str, Any]]:
        return [_decode_run(r) for r in self.db.query("select * from runs order by id")]

    def episode(self, episode_id: int) -> dict[str, Any]:
        rows = list(self.db.query(f"{EPISODE_SELECT} where e.id = ?", [episode_id]))
        if not rows:
            raise TraceStoreError(f"no episode {episode_id} in {self.path} (`confkv-agent traces ls` lists them)")
        return rows[0]

    def episodes(
        self,
        *,
        run_ids: Iterable[int] | None = None,
        policy: str | None = None,
        model: str | None = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Episodes (with their run's model), oldest first; `limit` keeps the most recent N."""
        where, params = [], []
        if run_ids is not None:
            ids = list(run_ids)
            where.append(f"e.run_id in ({','.join('?' * len(ids))})" if ids else "0")
            params += ids
        for column, value in (("e.policy", policy), ("r.model", model), ("e.status", status)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = EPISODE_SELECT + (" where " + " and ".join(where) if where else "") + " order by e.id desc"
        if limit is not None:
            sql += f" limit {int(limit)}"
        return list(reversed(list(self.db.query(sql, params))))

    def steps(self, episode_id: int) -> list[dict[str, Any]]:
        rows = list(self.db.query("select * from steps where episode_id = ? order by step", [episode_id]))
        for row in rows:
            row["kept_tokens_per_layer"] = json.loads(row["kept_tokens_per_layer"] or "[]")
        return rows

    def decode_tokens(self, episode_id: int, step: int | None = None) -> list[dict[str, Any]]:
        sql, params = "select * from decode_tokens where episode_id = ?", [episode_id]
        if step is not None:
            sql += " and step = ?"
            params.append(step)
        return list(self.db.query(sql + " order by step, token_index", params))

    def prefill_chunks(self, episode_id: int, step: int | None = None) -> list[dict[str, Any]]:
        """Prefill chunk rows, by step; [] for a database written before the table existed."""
        if "prefill_chunks" not in self.db.table_names():
            return []
        sql, params = "select * from prefill_chunks where episode_id = ?", [episode_id]
        if step is not None:
            sql += " and step = ?"
            params.append(step)
        return list(self.db.query(sql + " order by step, chunk_index", params))

    def blocked(self, episode_id: int) -> list[str]:
        """What confinement refused during an episode, in order."""
        if "blocked_requests" not in self.db.table_names():  # a database written before the table existed
            return []
        sql = "select what from blocked_requests where episode_id = ? order by seq"
        return [r[0] for r in self.conn.execute(sql, [episode_id])]

    def finished_tasks(self, run_id: int, *, include_errors: bool = False) -> set[str]:
        """Task ids a resumed run should skip: those with a 'done' episode (and 'error' ones if asked)."""
        statuses = ("done", "error") if include_errors else ("done",)
        marks = ",".join("?" * len(statuses))
        sql = f"select distinct task_id from episodes where run_id = ? and status in ({marks})"
        return {r[0] for r in self.conn.execute(sql, [run_id, *statuses])}

    def finished_keys(self, *, model: str | None = None, include_errors: bool = False) -> set[tuple[str, str, str]]:
        """(task_id, policy, model) triples already done in ANY run: for a resume that ignores config changes."""
        statuses = ("done", "error") if include_errors else ("done",)
        sql = (
            f"select distinct e.task_id, e.policy, r.model from episodes e join runs r on r.id = e.run_id "
            f"where e.status in ({','.join('?' * len(statuses))})"
        )
        params: list[Any] = list(statuses)
        if model is not None:
            sql += " and r.model = ?"
            params.append(model)
        return {(t, p, m) for t, p, m in self.conn.execute(sql, params)}

    def summary(
        self, *, run_ids: Iterable[int] | None = None, model: str | None = None, baseline: str = "full"
    ) -> TraceSummary:
        """Per-policy summary of the selected free-running runs' final attempts (see `traces.summary`); forced runs
        have their own (`forced_summary`)."""
        free = [e for e in self.episodes(run_ids=run_ids, model=model) if e["mode"] != "forced"]
        return summarize(final_attempts(free), baseline=baseline)

    def forced_summary(self, *, run_ids: Iterable[int] | None = None) -> dict[str, Any]:
        """Per-policy trajectory-forced scores (see `traces.forced`); empty without forced runs."""
        from traces.forced import forced_rows, summarize_forced

        return summarize_forced(forced_rows(self.db, run_ids))


def _decode_run(row: dict[str, Any]) -> dict[str, Any]:
    row["policy_config"] = json.loads(row["policy_config"] or "{}")
    row["machine"] = json.loads(row["machine"] or "null")
    return row

