"""Head-to-head questions on forced decisions: paired per task, verdict only where the interval excludes zero."""

from __future__ import annotations

import json

from traces.forced_compare import head_to_head, question_lines, questions

FULL = ["click [1]", "click [2]", "type [3] [x]", "stop [a]"]


def _row(policy: str, task: str, decisions: list[str], nll: float, kv: float, sha: str = "s", gate=None) -> dict:
    return {"policy": policy, "task_id": task, "broken": None, "trajectory_sha": sha, "decisions": json.dumps(decisions),
            "decision_acc": sum(d == f for d, f in zip(decisions, FULL, strict=True)) / len(FULL), "answer_nll": nll,
            "mean_kv_bytes": kv, "gate_open_rate": gate}  # fmt: skip


def _rows() -> list[dict]:
    rows = []
    for t in "abcdg":
        rows += [_row("full", t, FULL, 0.1, 1000.0),
                 _row("confkv-turn@180", t, FULL[:3] + ["stop [b]"], 0.2, 200.0, gate=0.5),
                 _row("confkv-fixed@180", t, ["click [9]", "click [2]", "click [9]", "stop [b]"], 0.5, 200.0),
                 _row("confkv-fixed@90", t, FULL, 0.1, 100.0)]  # fmt: skip
    rows.append(_row("confkv-turn@180", "e", FULL, 0.1, 200.0))  # only one side ran task e
    rows += [_row("full", "f", FULL, 0.1, 1000.0, sha="x"), _row("confkv-turn@180", "f", FULL, 0.1, 200.0, sha="x"),
             _row("confkv-fixed@180", "f", FULL, 0.1, 200.0, sha="y")]  # a different trajectory: not paired
    return rows


def test_head_to_head_pairs_tasks_and_gives_a_verdict_only_outside_zero() -> None:
    q = head_to_head(_rows(), "confkv-turn@180", "confkv-fixed@180")
    assert q.tasks == 5  # e: one side only; f: different trajectories
    assert q.d_agreement == 0.75 - 0.25 and q.d_agreement_ci == (0.5, 0.5)
    assert q.d_answer_nll == -0.3 and q.kv_ratio == 1.0 and q.gate_open_a == 0.5 and q.gate_open_b is None
    assert q.verdict == "confkv-turn@180 agrees more"
    four = head_to_head([r for r in _rows() if r["task_id"] != "g"], "confkv-turn@180", "confkv-fixed@180")
    assert four.d_agreement_ci == (0.5, 0.5) and four.verdict == "too few tasks (4 < 5)"  # zero width, no verdict
    mixed = _rows() + [_row("sliding@180", t, FULL if t in "ab" else ["x"] * 4, 0.3, 200.0) for t in "abcdg"]
    tie = head_to_head(mixed, "confkv-turn@180", "sliding@180")  # +25% on two tasks, -75% on three: spans zero
    assert tie.d_agreement_ci[0] < 0 < tie.d_agreement_ci[1] and tie.verdict == "not shown (interval spans 0)"
    # task g's full replayed another trajectory: a and b still pair on it (decisions vs the reference, answer NLL),
    # but agreement with full has four tasks, too few for a verdict
    moved = [dict(r, trajectory_sha="z") if r["policy"] == "full" and r["task_id"] == "g" else r for r in _rows()]
    q = head_to_head(moved, "confkv-turn@180", "confkv-fixed@180")
    assert (q.tasks, q.agreement_tasks, q.verdict) == (5, 4, "too few tasks (4 < 5)")
    assert "| confkv-turn@180 vs confkv-fixed@180 | 5 (4 with full) |" in question_lines(moved)[2]


def test_questions_match_budgets_and_print_rows() -> None:
    found = questions(_rows())
    assert [(q.a, q.b) for q in found] == [("confkv-turn@180", "confkv-fixed@180")]  # not @90: no turn at 90
    lines = question_lines(_rows())
    assert len(lines) == 3 and "| confkv-turn@180 vs confkv-fixed@180 | 5 | +50.0% [+50.0%, +50.0%] |" in lines[2]
    assert question_lines([r for r in _rows() if r["policy"] == "full"]) == []
