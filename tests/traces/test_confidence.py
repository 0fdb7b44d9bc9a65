"""`confkv-agent traces confidence`: the gate's signal per kind of forward, read from what episodes recorded."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from traces.records import DecodeToken, PrefillChunk, StepRecord
from traces.store import TraceStore

runner = CliRunner()


def _db(tmp_path: Path) -> Path:
    """Run 1: two steps; prefill chunks 0.9, 0.95, 0.4; replies (0.99, 0.6) and (0.3, 0.98, 0.97). Run 2: noise."""
    path = tmp_path / "t.sqlite"
    with TraceStore(path) as store:
        run = store.start_run("tiny", "confkv", {"name": "confkv"}, git_revision=None, machine=None)
        other = store.start_run("tiny", "full", {"name": "full"}, git_revision=None, machine=None)
        ep = store.start_episode(run, "1")
        for step, (chunks, tokens) in enumerate((([0.9, 0.95], [0.99, 0.6]), ([0.4], [0.3, 0.98, 0.97]))):
            store.add_decode_tokens(ep, step, [DecodeToken(i, "t", c, 64) for i, c in enumerate(tokens)])
            store.add_prefill_chunks(ep, step, [PrefillChunk(i, 32, c) for i, c in enumerate(chunks)])
            store.add_step(ep, StepRecord(step, action="click [1]"))
        store.finish_episode(ep, success=True)
        noise = store.start_episode(other, "1")
        store.add_decode_tokens(noise, 0, [DecodeToken(0, "t", 0.01, 64)])
        store.add_prefill_chunks(noise, 0, [PrefillChunk(0, 32, 0.01)])
        store.add_step(noise, StepRecord(0, action="click [1]"))
        store.finish_episode(noise, success=False)
    return path


def test_confidence_counts_each_kind_of_forward_below_tau(tmp_path: Path) -> None:
    db = _db(tmp_path)
    result = runner.invoke(app, ["traces", "confidence", "--db", str(db), "--run", "1", "--tau", "0.5", "--json"])
    assert result.exit_code == 0, result.output
    kinds = json.loads(result.output)["kinds"]
    assert kinds["prefill chunk"]["n"] == 3 and kinds["prefill chunk"]["below_tau"] == 1 / 3
    assert kinds["action token"]["n"] == 5 and kinds["action token"]["below_tau"] == 1 / 5
    assert kinds["reply after 1st token"]["below_tau"] == 1 / 2  # 0.99 and 0.3
    assert kinds["reply min"]["quantiles"][2] == 0.45  # the median of 0.6 and 0.3
    assert kinds["reply mean"]["below_tau"] == 0.0  # (0.99+0.6)/2 and (0.3+0.98+0.97)/3 are both above
    table = runner.invoke(app, ["traces", "confidence", "--db", str(db), "--run", "1", "--run", "2",
                                "--png", str(tmp_path / "c.png")])  # fmt: skip
    assert table.exit_code == 0, table.output
    assert "| prefill chunk | 4 |" in table.output and (tmp_path / "c.png").stat().st_size > 0


def test_confidence_refuses_a_run_the_database_lacks(tmp_path: Path) -> None:
    result = runner.invoke(app, ["traces", "confidence", "--db", str(_db(tmp_path)), "--run", "9"])
    assert result.exit_code == 1 and "no run 9" in result.output


def test_forced_decisions_give_the_turn_gates_signal(tmp_path: Path) -> None:
    """Per forced decision: its first choice and its least confident one (what `confkv.gates.turn` compares)."""
    from traces.forced import record_forced

    db = _db(tmp_path)
    with TraceStore(db) as store:
        run = store.start_run("tiny", "full", {"name": "full"}, git_revision=None, machine=None)
        ep = store.start_episode(run, "2")
        record_forced(store, ep, {"decision_confidences": json.dumps([[0.9, 0.4, 1.0], [0.7, 0.95], []])}, [])
        store.finish_episode(ep, success=True)
    result = runner.invoke(app, ["traces", "confidence", "--db", str(db), "--run", "3", "--tau", "0.5", "--json"])
    assert result.exit_code == 0, result.output
    kinds = json.loads(result.output)["kinds"]
    assert kinds["decision min"]["n"] == 2 and kinds["decision min"]["below_tau"] == 1 / 2  # 0.4 and 0.7
    assert kinds["decision 1st choice"]["below_tau"] == 0.0  # 0.9 and 0.7
    assert kinds["reply min"]["n"] == 0  # a forced run records no decode tokens
