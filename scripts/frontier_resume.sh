#!/usr/bin/env bash
# Resume the forced frontier (issue 36) where its rows stand: `traces forced-plan` lists every task that still owes
# a label, cheapest first, at the precision its rows have; this runs `eval --mode forced` on them one task at a time.
# Start two at once (each single-threaded) from a pinned worktree: they share the DB and each claims a task's pending
# labels under a lease, so the second skips what the first holds. Killed, it loses at most the episodes in flight;
# rerun it. Only tasks at $DTYPE run (a task begun at another precision waits for a CPU that runs it fast).
# Usage: scripts/frontier_resume.sh [forced-plan options, e.g. --memory-span short --exclude-tasks 14,116,123]
# Env: DB (runs/frontier/frontier.sqlite, restored from the committed snapshot when missing), DTYPE (fp32),
#      POLICIES, BUDGETS (180), MODEL (qwen2.5-coder-1.5b), PYTHON (the venv's, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
DB="${DB:-runs/frontier/frontier.sqlite}"
DTYPE="${DTYPE:-fp32}"
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
plan=$("$PY" -m cli traces forced-plan tasks/ --db "$DB" --policies "$POLICIES" --budgets "$BUDGETS" \
  --dtype "$DTYPE" --commands "$@")
echo "$plan" | awk -v d="$DTYPE" '$1 == d' | while read -r precision path; do
  echo "[resume] $(date -u +%FT%TZ) $path at $precision" >&2
  "$PY" -m cli eval "$path" --mode forced --policies "$POLICIES" --budgets "$BUDGETS" --model "$MODEL" \
    --dtype "$precision" --db "$DB" < /dev/null || echo "[resume] $path ended with status $?; going on" >&2
done
echo "[resume] $(date -u +%FT%TZ) plan done" >&2
