#!/usr/bin/env bash
# Resume the forced frontier (issue 36) where its rows stand: `traces forced-plan` lists every task that still owes
# a label, cheapest first, at the precision its rows have; this runs `eval --mode forced` on them in one process.
# Start two at once (each single-threaded) from a pinned worktree: they share the DB and each claims a task's pending
# labels under a lease, so the second skips what the first holds. Killed, it loses at most the episodes in flight;
# rerun it. Only tasks at $DTYPE run (a task begun at another precision waits for a CPU that runs it fast, or with
# --rebase is scored again at $DTYPE from `full`: POLICIES must then include full);
# DTYPE=auto (the default) is the precision `--dtype auto` measures fastest here, resolved once to its name.
# To move a loop to new code at a task boundary (each task's labels from one code): `kill -USR1 <its eval's pid>`;
# the eval finishes the task in flight and this script exits 75; start it again from the new worktree.
# Usage: scripts/frontier_resume.sh [forced-plan options, e.g. --memory-span short --rebase --exclude-tasks 14,116,123]
# Env: DB (runs/frontier/frontier.sqlite, restored from the committed snapshot when missing), DTYPE (auto),
#      POLICIES, BUDGETS (180), MODEL (qwen2.5-coder-1.5b), PYTHON (the venv's, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
DB="${DB:-runs/frontier/frontier.sqlite}"
DTYPE="${DTYPE:-auto}"
POLICIES="${POLICIES:-full,confkv-fixed,sliding-int8,h2o-int8,random-int8}"
BUDGETS="${BUDGETS:-180}"
MODEL="${MODEL:-qwen2.5-coder-1.5b}"
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
SNAPSHOT=docs/results/frontier-qwen2.5-coder-1.5b.partial.sqlite.gz
if [ ! -f "$DB" ]; then
  mkdir -p "$(dirname "$DB")"
  gunzip -c "$SNAPSHOT" > "$DB"
  echo "[resume] restored $DB from $SNAPSHOT" >&2
fi
export OMP_NUM_THREADS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ "$DTYPE" = auto ]; then  # one thread, as the evals run: the timings are cached per machine and thread count
  # under a lock: two loops started together on a new machine would each time the CPU, against each other, and
  # could pin two precisions; the second waits and reads the first's cached timings
  DTYPE=$(flock "$DB.dtype.lock" "$PY" -m cli models precision "$MODEL" --dtype auto)
  echo "[resume] --dtype auto is $DTYPE on this machine" >&2
fi
case "$DTYPE" in
  "" | *[!a-z0-9-]*) echo "[resume] not a precision name: '$DTYPE'" >&2; exit 1 ;;
esac
# One eval process takes every task owed at $DTYPE, in the plan's order: its per-process prefix cache
# (agent.model_policy._PREFIXES) then prefills the ~2.3K-token system prompt once per label, not once per task
# (about two minutes per label at fp32 on one thread, half of a short task's episode). A run that ends in error is
# planned again from the DB, at most three times, so a task that keeps failing cannot loop (the script then exits
# with eval's status, not as if the plan were done).
status=0
for attempt in 1 2 3; do
  paths=$("$PY" -m cli traces forced-plan tasks/ --db "$DB" --policies "$POLICIES" --budgets "$BUDGETS" \
    --dtype "$DTYPE" --commands "$@" | awk -v d="$DTYPE" '$1 == d {print $2}')
  if [ -z "$paths" ]; then break; fi
  echo "[resume] $(date -u +%FT%TZ) attempt $attempt: $(echo "$paths" | wc -l) tasks at $DTYPE" >&2
  status=0
  # shellcheck disable=SC2086  # one path per word
  "$PY" -m cli eval $paths --mode forced --policies "$POLICIES" --budgets "$BUDGETS" --model "$MODEL" \
    --dtype "$DTYPE" --db "$DB" < /dev/null || status=$?
  if [ "$status" -eq 0 ]; then break; fi
  if [ "$status" -eq 75 ]; then
    echo "[resume] $(date -u +%FT%TZ) drained (SIGUSR1) after a task; run this script again to go on" >&2
    exit 75
  fi
  echo "[resume] eval ended with status $status; planning again" >&2
done
if [ "$status" -ne 0 ]; then
  echo "[resume] $(date -u +%FT%TZ) eval failed three times (last status $status): see its errors above" >&2
  exit "$status"
fi
echo "[resume] $(date -u +%FT%TZ) plan done" >&2
