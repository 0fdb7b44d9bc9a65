#!/usr/bin/env bash
# Snapshot a live forced-frontier DB into docs/results (issue 36): a consistent copy (sqlite .backup, safe while
# eval processes write), gzipped; every table of the page, written by `traces forced-table`, into one Markdown
# file; and both figures. The page (docs/results/frontier-qwen2.5-coder-1.5b.md) quotes some of these tables:
# scripts/frontier_page.py refreshes them there (its prose stays the author's to restate).
# Usage: scripts/frontier_snapshot.sh [live DB] [name]   (defaults: runs/frontier/frontier.sqlite,
# frontier-qwen2.5-coder-1.5b; OUT_DIR=docs/results; NEW_DTYPE, the precision the time left assumes for every
# task still owing labels, with --rebase as the loops run: fp32-bf16-bf16). Needs sqlite3 and the venv's confkv-agent.
set -euo pipefail
cd "$(dirname "$0")/.."
DB="${1:-runs/frontier/frontier.sqlite}"
NAME="${2:-frontier-qwen2.5-coder-1.5b}"
OUT="${OUT_DIR:-docs/results}"
CLI="${CONFKV_AGENT:-.venv/bin/confkv-agent}"
NEW_DTYPE="${NEW_DTYPE:-fp32-bf16-bf16}"
[ -f "$DB" ] || { echo "no database at $DB" >&2; exit 1; }
SNAP="$(mktemp -d)/snapshot.sqlite"
sqlite3 "$DB" ".backup '$SNAP'"
sqlite3 "$SNAP" "pragma wal_checkpoint(TRUNCATE);" >/dev/null
gzip -9 -c "$SNAP" > "$OUT/$NAME.partial.sqlite.gz"

AT180=full,confkv-fixed@180,sliding-int8@180,h2o-int8@180,random-int8@180
LABELS180=full,confkv-fixed,sliding-int8,h2o-int8,random-int8  # the same labels, as forced-plan takes them
GATE=full,confkv-fixed@180,confkv-turn@180,confkv-turn-wide@180,confkv-turn-recall@180,confkv@180
SWEEP=full,confkv-fixed@90,confkv-fixed@180,confkv-fixed@360,sliding-int8@90,sliding-int8@180,sliding-int8@360
SWEEP=$SWEEP,h2o-int8@90,h2o-int8@180,h2o-int8@360
TABLES="$OUT/$NAME-tables.md"
section() {  # title, then forced-table's arguments
  local title="$1"; shift
  printf '\n## %s\n\n`confkv-agent traces forced-table --db <snapshot> %s`\n\n' "$title" "$*"
  "$CLI" traces forced-table --db "$SNAP" "$@" 2>/dev/null || echo "(no rows)"
}
{
  printf '# The frontier'"'"'s tables (generated)\n\nWritten by `scripts/frontier_snapshot.sh` from'
  printf ' [%s.partial.sqlite.gz](%s.partial.sqlite.gz) (%s UTC, %s results). What they mean: [the page](%s.md).\n' \
    "$NAME" "$NAME" "$(date -u +'%F %H:%M')" "$(sqlite3 "$SNAP" "select count(*) from forced_results f join episodes e on e.id = f.episode_id where e.status = 'done'")" "$NAME"
  printf '\n## Coverage: the five labels at 180, by site and memory span\n\n'
  printf '`confkv-agent traces forced-plan tasks/ --db <snapshot> --policies %s --budgets 180 --dtype %s --rebase --coverage`\n\n' "$LABELS180" "$NEW_DTYPE"
  "$CLI" traces forced-plan tasks/ --db "$SNAP" --policies "$LABELS180" --budgets 180 --dtype "$NEW_DTYPE" --rebase \
    --coverage 2>/dev/null || echo "(no rows)"
  # the time left, from the rows' own rates; tasks not begun are costed at $NEW_DTYPE (what new tasks have run at)
  printf '\nTime left (`traces forced-plan ... --rebase --estimate`, every task owing labels at %s): the five labels at 180, ' "$NEW_DTYPE"
  "$CLI" traces forced-plan tasks/ --db "$SNAP" --policies "$LABELS180" --budgets 180 --dtype "$NEW_DTYPE" \
    --rebase --estimate 2>/dev/null || echo "(no estimate)"
  printf '\nthe sweep on the long tasks (with `full` and the @180 labels where a task is rebased), '
  "$CLI" traces forced-plan tasks/ --db "$SNAP" --policies full,confkv-fixed,sliding-int8,h2o-int8 --budgets 90,180,360 \
    --memory-span long --dtype "$NEW_DTYPE" --rebase --estimate 2>/dev/null || echo "(no estimate)"
  section "The baselines at confkv's footprint, all tasks" --policies "$AT180"
  section "The baselines at confkv's footprint, long-memory tasks" --policies "$AT180" --memory-span long
  section "The baselines at confkv's footprint, short-memory tasks" --policies "$AT180" --memory-span short
  section "The gate and recall against the gate off" --policies "$GATE"
  section "The same, tau's tasks (15, 16) held out" --policies "$GATE" --exclude-tasks 15,16
  section "The footprint sweep, tasks with every label" --policies "$SWEEP" --common
  section "The forward gate closed: confkv and confkv-recall at 180 beside confkv-fixed at 90 (n_low 225 = budget 225)" \
    --policies full,confkv@180,confkv-recall@180,confkv-fixed@90 --tasks 3,11
} > "$TABLES"
"$CLI" traces forced-table --db "$SNAP" --policies "$AT180" --png "$OUT/$NAME-partial.png" >/dev/null
"$CLI" traces forced-table --db "$SNAP" --policies "$SWEEP" --common --png "$OUT/${NAME/frontier/frontier-sweep}-partial.png" >/dev/null \
  || echo "no sweep figure (no task has every sweep label)" >&2
PAGE="$OUT/$NAME.md"
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
if [ -f "$PAGE" ]; then "$PY" scripts/frontier_page.py "$TABLES" "$PAGE"; fi  # the page's quoted tables, not its prose
echo "wrote $OUT/$NAME.partial.sqlite.gz, $TABLES and the figures; snapshot kept at $SNAP"
