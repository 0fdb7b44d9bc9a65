"""The trace database schema: five tables a user can query with `sqlite-utils` or Datasette.

Kept apart from the store so the schema reads as one page: what each column means is documented here once, and the
store only moves rows. Column names are plain (no JSON blobs except where the value is a list or a nested config)
so `sqlite-utils query runs/traces.sqlite "select policy, avg(success) from episodes group by policy"` just works.
"""

from __future__ import annotations

import sqlite_utils

from traces.forced import ensure_forced_schema

SCHEMA_VERSION = 1
EPISODE_STATUSES = ("running", "done", "error")

# One row per (model, policy, policy config) evaluation; a resumed eval reuses its run (see TraceStore.start_run).
RUNS_COLUMNS: dict[str, type] = {
    "id": int,
    "created": str,  # ISO 8601 UTC
    "run_key": str,  # hash of (model, policy, policy config): equal keys = same experiment, so resume may reuse it
    "model": str,
    "policy": str,
    "policy_config": str,  # JSON object, the policy's full config (budgets, ranker, ...)
    "git_revision": str,  # commit hash, "+dirty" when the tree had uncommitted changes; NULL outside git
    "machine": str,  # JSON: cpu, cpu_kind, cores, torch version, cuda device (NULL without GPU), python, platform
    #                  (of the machine that created the run; each episode names its own CPU in `cpu_kind`)
    "notes": str,
    "mode": str,  # "free" (the agent decides) or "forced" (reference trajectory teacher-forced, runner.forced)
}

# One row per attempt at a task; a crashed attempt stays as status 'error' and a rerun gets a new row.
EPISODES_COLUMNS: dict[str, type] = {
    "id": int,
    "run_id": int,
    "task_id": str,
    "policy": str,
    "status": str,  # running | done | error
    "success": int,  # 0/1 from the evaluator; NULL while running, 0 for errors
    "score": float,  # evaluator score in [0, 1]
    "eval_reason": str,  # evaluator's explanation
    "steps": int,  # number of recorded steps (filled on finish)
    "prefilled_tokens": int,  # sum over steps of tokens actually prefilled (not re-sent context)
    "output_tokens": int,  # sum over steps of generated tokens
    "decode_ms": float,  # sum over steps
    "prefill_ms": float,  # sum over steps
    "peak_kv_bytes": int,  # peak bytes of the KV cache during the episode
    "full_kv_bytes": int,  # bytes a full (never evicting) cache would have needed for the same episode
    "peak_rss_bytes": int,  # process peak resident memory
    "peak_cuda_bytes": int,  # torch.cuda.max_memory_allocated; NULL without GPU
    "gate_open_rate": float,  # share of the episode's forwards on which the confidence gate opened; NULL: ungated
    "wall_s": float,
    "error": str,  # error text / traceback for status 'error'
    "started": str,
    "finished": str,
    "owner": str,  # "host:pid" of the process running it (see traces.leases); a dead owner's episode is stale
    "cpu_kind": str,  # the CPU that ran this attempt (confkv.cpu.cpu_kind): a resumed run spans machines
    "heartbeat": float,  # unix time of the owner's last sign of life while 'running'
}

# One row per agent step (one model decision and its execution).
STEPS_COLUMNS: dict[str, type] = {
    "episode_id": int,
    "step": int,  # 0-based step index
    "url": str,
    "observation": str,  # the observation text given to the model
    "observation_tokens": int,
    "prefilled_tokens": int,  # new tokens prefilled this step (observation + chat scaffolding)
    "total_tokens": int,  # logical context length after the step
    "output_tokens": int,  # tokens generated this step
    "raw_output": str,  # the model's raw reply
    "action": str,  # the parsed action text, e.g. "click [12]"
    "result": str,  # executor's short result ("ok", "navigated to ...")
    "parse_error": str,
    "exec_error": str,
    "kept_tokens_per_layer": str,  # JSON list[int], physical cache length per layer after the step
    "kv_bytes": int,  # cache bytes after the step
    "prefill_ms": float,
    "decode_ms": float,
    "step_ms": float,  # whole step: observe + prefill + decode + execute
}

# One row per generated token: the signal Conf-KV acts on.
DECODE_TOKENS_COLUMNS: dict[str, type] = {
    "episode_id": int,
    "step": int,
    "token_index": int,  # 0-based within the step's reply
    "token_text": str,
    "confidence": float,  # in [0, 1]
    "budget": int,  # tokens per layer the budget schedule allowed for this token
    "kept_tokens": int,  # tokens actually kept (mean over layers)
    "kv_bytes": int,
}

# One row per request or connection the browser confinement refused (route handler, goto or guard proxy).
BLOCKED_COLUMNS: dict[str, type] = {
    "id": int,
    "episode_id": int,
    "seq": int,  # order within the episode
    "what": str,  # the URL, or "proxy: CONNECT host:port" for what only the guard proxy saw
}

# One row per prefill chunk of a step (system prompt + new turn), before that step's decode tokens.
PREFILL_CHUNKS_COLUMNS: dict[str, type] = {
    "episode_id": int,
    "step": int,
    "chunk_index": int,  # 0-based within the step
    "tokens": int,  # tokens prefilled by this chunk
    "confidence": float,  # mean confidence over the chunk's last positions
    "budget": int,  # budget in force after the chunk; NULL = no budget (full)
    "kept_tokens": int,  # tokens kept after the chunk (mean over layers)
    "kv_bytes": int,
}

_EPISODES_VIEW = """
select e.id, e.run_id, r.model, e.policy, e.task_id, e.status, e.success, e.score, e.steps,
       e.peak_kv_bytes, e.full_kv_bytes,
       round(1.0 * e.peak_kv_bytes / nullif(e.full_kv_bytes, 0), 4) as kv_fraction_of_full,
       e.prefilled_tokens, e.wall_s, e.started, e.finished
from episodes e join runs r on r.id = e.run_id
"""


def ensure_schema(db: sqlite_utils.Database) -> None:
    """Create missing tables, indexes and the `episode_overview` view; idempotent and safe to race.

    Called inside the store's write transaction, so concurrent openers serialize on it instead of both
    creating the same table.
    """
    db["runs"].create(RUNS_COLUMNS, pk="id", not_null=["created", "run_key", "model", "policy"], if_not_exists=True)
    db["episodes"].create(
        EPISODES_COLUMNS,
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
        not_null=["run_id", "task_id", "policy", "status", "started"],
        if_not_exists=True,
    )
    for table, columns in (("runs", RUNS_COLUMNS), ("episodes", EPISODES_COLUMNS)):
        have = set(db[table].columns_dict)
        for name, kind in columns.items():  # databases written before a column existed gain it
            if name not in have:
                db[table].add_column(name, kind)
    db["steps"].create(
        STEPS_COLUMNS,
        pk=("episode_id", "step"),
        foreign_keys=[("episode_id", "episodes", "id")],
        if_not_exists=True,
    )
    db["decode_tokens"].create(
        DECODE_TOKENS_COLUMNS,
        pk=("episode_id", "step", "token_index"),
        foreign_keys=[("episode_id", "episodes", "id")],
        if_not_exists=True,
    )
    db["blocked_requests"].create(
        BLOCKED_COLUMNS, pk="id", foreign_keys=[("episode_id", "episodes", "id")], if_not_exists=True
    )
    db["blocked_requests"].create_index(["episode_id"], if_not_exists=True)
    db["prefill_chunks"].create(
        PREFILL_CHUNKS_COLUMNS,
        pk=("episode_id", "step", "chunk_index"),
        foreign_keys=[("episode_id", "episodes", "id")],
        if_not_exists=True,
    )
    ensure_forced_schema(db)
    db["runs"].create_index(["run_key"], if_not_exists=True)
    db["episodes"].create_index(["run_id", "task_id"], if_not_exists=True)
    db["episodes"].create_index(["policy"], if_not_exists=True)
    db["episodes"].create_index(["status"], if_not_exists=True)
    if "episode_overview" not in db.view_names():
        db.create_view("episode_overview", _EPISODES_VIEW)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
