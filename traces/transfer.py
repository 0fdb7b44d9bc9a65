"""Move one finished episode, with every row that belongs to it, from one trace database into another.

Why: a remote eval worker (the Ray backend) records its episode in a scratch database of its own through the usual
runner, then ships the rows; the driver writes them into the real store in one transaction, so that store stays
the single source of truth and only one process ever writes it. Every table with an `episode_id` column travels
(steps, decode tokens, prefill chunks, and whatever later tables key on the episode), copied column by column
where the target has the column.
"""

from __future__ import annotations

from typing import Any

from traces.store import TraceStore, TraceStoreError

EpisodePayload = dict[str, list[dict[str, Any]]]  # table name -> rows; "episodes" holds the one episode row


def _episode_tables(store: TraceStore) -> list[str]:
    return sorted(
        name for name in store.db.table_names()
        if name != "episodes" and "episode_id" in store.db[name].columns_dict
    )  # fmt: skip


def export_episode(store: TraceStore, episode_id: int) -> EpisodePayload:
    """The episode's own row and all rows keyed on it; the episode must be closed (done or error)."""
    rows = list(store.db.query("select * from episodes where id = ?", [episode_id]))
    if not rows:
        raise TraceStoreError(f"no episode {episode_id} in {store.path}")
    if rows[0]["status"] == "running":
        raise TraceStoreError(f"episode {episode_id} is still running; only closed episodes can be exported")
    payload: EpisodePayload = {"episodes": rows}
    for table in _episode_tables(store):
        payload[table] = list(store.db.query(f"select * from [{table}] where episode_id = ?", [episode_id]))
    return payload


def import_episode(store: TraceStore, run_id: int, payload: EpisodePayload) -> int:
    """Write an exported episode under `run_id` (its policy must match the run's) in one transaction; new id."""
    (episode,) = payload["episodes"]
    with store._write() as db:  # the store's own immediate transaction: all rows or none
        row = db.execute("select policy from runs where id = ?", [run_id]).fetchone()
        if row is None:
            raise TraceStoreError(f"no run {run_id} in {store.path}")
        if row[0] != episode["policy"]:
            raise ValueError(f"run {run_id} is for policy {row[0]!r}, not {episode['policy']!r}")
        columns = db["episodes"].columns_dict
        values = {k: v for k, v in episode.items() if k in columns and k != "id"}
        values["run_id"] = run_id
        new_id = int(db["episodes"].insert(values).last_pk)
        for table, rows in payload.items():
            if table == "episodes" or not rows:
                continue
            if table not in db.table_names():
                raise TraceStoreError(f"{store.path} has no table {table!r}; open it once with this version first")
            target = set(db[table].columns_dict)
            if db[table].pks == ["id"]:
                target.discard("id")  # a surrogate key is the target's to assign
            db[table].insert_all([{**{k: v for k, v in r.items() if k in target}, "episode_id": new_id} for r in rows])
    return new_id
