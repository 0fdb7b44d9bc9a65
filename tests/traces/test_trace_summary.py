"""Summary math over plain rows: rates, paired comparisons with `full`, memory ratios, throughput."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from traces.summary import final_attempts, summarize, summary_table, unfinished


def ep(
    policy,
    task,
    success,
    peak=None,
    *,
    status="done",
    full_kv=None,
    id_=None,
    run=1,
    prefilled=None,
    out=None,
    decode_ms=None,
    wall=None,
):
    return {
        "id": id_,
        "run_id": run,
        "policy": policy,
        "task_id": task,
        "status": status,
        "success": success,
        "peak_kv_bytes": peak,
        "full_kv_bytes": full_kv,
        "prefilled_tokens": prefilled,
        "output_tokens": out,
        "decode_ms": decode_ms,
        "wall_s": wall,
    }


def test_success_rate_retention_and_kv_ratios_against_full():
    rows = [
        ep("full", "a", 1, 1000, full_kv=1000),
        ep("full", "b", 1, 3000, full_kv=3000),
        ep("full", "c", 0, 2000, full_kv=2000),
        ep("full", "d", 1, 2000, full_kv=2000),
        ep("confkv", "a", 1, 250, full_kv=1000),
        ep("confkv", "b", 0, 600, full_kv=3000),
        ep("confkv", "c", 0, 500, full_kv=2000),
        ep("confkv", "d", 1, 650, full_kv=2000),
    ]
    s = summarize(rows)
    assert list(s.policies) == ["full", "confkv"]  # baseline first
    full, conf = s.policies["full"], s.policies["confkv"]
    assert (full.episodes, full.successes, full.success_rate) == (4, 3, 0.75)
    assert full.retention_vs_full == 1.0 and full.peak_kv_ratio_vs_full == 1.0
    assert conf.success_rate == 0.5
    assert conf.retention_vs_full == pytest.approx(0.5 / 0.75)
    assert conf.mean_peak_kv_bytes == 500 and conf.max_peak_kv_bytes == 650
    assert conf.peak_kv_ratio_vs_full == pytest.approx(500 / 2000)
    assert conf.max_peak_kv_ratio_vs_full == pytest.approx(650 / 3000)
    # per-episode fraction of what a full cache would have needed: mean(0.25, 0.2, 0.25, 0.325)
    assert conf.kv_fraction_of_full_need == pytest.approx((0.25 + 0.2 + 0.25 + 0.325) / 4)


def test_comparisons_are_paired_on_shared_tasks():
    # full solved the easy task and failed the hard one; sliding only ran the easy task
    rows = [ep("full", "easy", 1, 100), ep("full", "hard", 0, 900), ep("sliding", "easy", 1, 50)]
    sliding = summarize(rows).policies["sliding"]
    assert sliding.success_rate == 1.0
    assert sliding.retention_vs_full == 1.0  # vs full's 1/1 on "easy", not its 1/2 overall
    assert sliding.peak_kv_ratio_vs_full == pytest.approx(0.5)  # vs 100, not vs the mean 500


def test_errors_count_as_failures_and_undefined_ratios_are_none():
    rows = [ep("full", "a", 0, 100), ep("h2o", "a", None, None, status="error"), ep("h2o", "b", 1, 40)]
    s = summarize(rows)
    h2o = s.policies["h2o"]
    assert (h2o.episodes, h2o.errors, h2o.successes) == (2, 1, 1)
    assert h2o.retention_vs_full is None  # full succeeded on nothing: retention undefined, not infinite
    assert h2o.mean_peak_kv_bytes == 40 and h2o.peak_kv_ratio_vs_full is None  # no shared task with both peaks
    no_base = summarize([ep("confkv", "a", 1, 10)]).policies["confkv"]
    assert no_base.retention_vs_full is None and no_base.peak_kv_ratio_vs_full is None
    assert no_base.kv_fraction_of_full_need is None and no_base.decode_tokens_per_s is None


def test_throughput_and_prefill_means():
    rows = [
        ep("full", "a", 1, prefilled=1000, out=30, decode_ms=3000, wall=10.0),
        ep("full", "b", 1, prefilled=500, out=10, decode_ms=1000, wall=20.0),
    ]
    full = summarize(rows).policies["full"]
    assert full.mean_prefilled_tokens == 750
    assert full.decode_tokens_per_s == pytest.approx(40 / 4.0)
    assert full.mean_wall_s == 15.0
    assert full.gate_open_rate is None  # ungated: no rate, not 0%


def test_gate_open_rate_is_the_mean_over_episodes_that_report_one():
    rows = [{**ep("confkv", "a", 1), "gate_open_rate": 0.2}, {**ep("confkv", "b", 0), "gate_open_rate": 0.4},
            ep("confkv", "c", 0)]  # an episode from before the column existed
    assert summarize(rows).policies["confkv"].gate_open_rate == pytest.approx(0.3)


def test_running_rows_are_refused_and_final_attempts_keep_one_per_task():
    with pytest.raises(ValueError, match="summarize finished episodes only"):
        summarize([ep("full", "a", None, status="running", id_=1)])
    rows = [
        ep("full", "a", 0, status="error", id_=1),
        ep("full", "a", 1, id_=2),
        ep("full", "a", 0, status="error", id_=3),
        ep("full", "b", 0, status="error", id_=4),
        ep("full", "b", 0, status="error", id_=5),
        ep("full", "c", None, status="running", id_=6),
        ep("full", "a", 0, id_=7, run=2),  # same task in another run counts separately
    ]
    kept = final_attempts(rows)
    assert [r["id"] for r in kept] == [2, 5, 7]
    # one suite finished under two runs: each task once, a later run's finished episode replacing an earlier error
    rows += [ep("full", "b", 1, id_=8, run=2), ep("full", "d", 0, status="error", id_=9, run=2)]
    assert [r["id"] for r in final_attempts(rows, across_runs=True)] == [7, 8, 9]


def test_interrupted_attempts_are_unfinished_not_failures():
    cut = "interrupted (Ctrl-C or SIGTERM)"
    rows = [
        {**ep("full", "a", 0, status="error", id_=1), "error": cut},
        ep("full", "a", 1, id_=2),  # rerun on resume: the pass counts
        {**ep("full", "b", 0, status="error", id_=3), "error": "interrupted: left running by a process that is gone"},
        {**ep("full", "b", 0, status="error", id_=4), "error": cut},
        {**ep("full", "c", 0, status="error", id_=5), "error": "BrowserCrashed: target closed"},  # a real failure
    ]
    assert [r["id"] for r in final_attempts(rows)] == [2, 5]
    assert summarize(final_attempts(rows)).policies["full"].success_rate == 0.5  # 1 of 2, not 1 of 3
    assert [r["id"] for r in unfinished(rows)] == [4]


def test_json_shape_and_table_rendering():
    rows = [ep("full", "a", 1, 1000), ep("confkv", "a", 1, 250)]
    payload = summarize(rows).to_json()
    json.dumps(payload)  # serializable as is
    assert set(payload["policies"]) == {"full", "confkv"}
    assert {"success_rate", "retention_vs_full", "peak_kv_ratio_vs_full", "episodes"} <= set(
        payload["policies"]["confkv"]
    )
    assert payload["policies"]["confkv"]["peak_kv_ratio_vs_full"] == 0.25
    console = Console(record=True, width=200)
    console.print(summary_table(summarize(rows)))
    text = console.export_text()
    assert "confkv" in text and "0.25" in text and "250 B" in text and "100%" in text
