"""`confkv-agent models calibrate` and `--set tau=calibrated`: a threshold measured on one model's recorded traffic,
stored with that model, read back by the policies built for it (issue 37)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli.main import app
from cli.policies import build_policies
from confkv.calibration import calibrated_tau, calibration_path, load_calibration, quantile
from traces.forced import record_forced
from traces.records import PrefillChunk, StepRecord
from traces.store import TraceStore

runner = CliRunner()


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFKV_HOME", str(tmp_path / "home"))


def _db(tmp_path: Path) -> Path:
    """Run 1 (model tiny, full): task a's decisions have minima 0.2, 0.4, 0.6; task b's 0.8; prefill chunks 0.1-0.9.
    Run 2: another model."""
    path = tmp_path / "t.sqlite"
    with TraceStore(path) as store:
        run = store.start_run("tiny", "full", {"name": "full"}, git_revision=None, machine=None)
        for task, decisions in (("a", [[0.9, 0.2], [0.4], [0.6, 0.7]]), ("b", [[0.8, 0.95]])):
            ep = store.start_episode(run, task)
            record_forced(store, ep, {"decision_confidences": json.dumps(decisions)}, [])
            store.add_prefill_chunks(ep, 0, [PrefillChunk(i, 32, c) for i, c in enumerate((0.1, 0.5, 0.9))])
            store.add_step(ep, StepRecord(0, action="click [1]"))
            store.finish_episode(ep, success=True)
        other = store.start_run("big", "full", {"name": "full"}, git_revision=None, machine=None)
        store.finish_episode(store.start_episode(other, "a"), success=True)
    return path


def test_quantile_interpolates_like_statistics_inclusive() -> None:
    from statistics import quantiles

    vals = [0.31, 0.9, 0.12, 0.55, 0.7, 0.42, 0.66]
    assert quantile(vals, 0.25) == pytest.approx(quantiles(vals, n=4, method="inclusive")[0])
    assert quantile([0.2, 0.4], 0.5) == pytest.approx(0.3)


def test_calibrate_stores_each_gates_quantile_and_policies_read_it(tmp_path: Path) -> None:
    db = _db(tmp_path)
    result = runner.invoke(app, ["models", "calibrate", "tiny", "--db", str(db), "--run", "1", "--quantile", "0.5"])
    assert result.exit_code == 0, result.output
    gates = load_calibration("tiny")
    assert gates["turn"]["tau"] == pytest.approx(0.5)  # median of decision minima 0.2, 0.4, 0.6, 0.8
    assert gates["turn"]["n"] == 4 and gates["turn"]["runs"] == [1] and gates["turn"]["policies"] == ["full"]
    assert gates["forward"]["tau"] == pytest.approx(0.5) and gates["forward"]["n"] == 6  # the prefill chunks
    assert calibration_path("tiny").is_file() and "opens on 50.0%" in result.output
    built = build_policies(["confkv-turn", "confkv", "sliding"], ["tau=calibrated"], model="tiny")
    assert built["confkv-turn"].gate.plugin.tau == pytest.approx(0.5)
    assert built["confkv"].gate.plugin.tau == pytest.approx(0.5)
    assert "tau" not in dict(built["sliding"].gate.values)  # a fixed budget has no threshold
    # A calibration split: task a alone, turn gate alone; the forward record stays as it was.
    result = runner.invoke(app, ["models", "calibrate", "tiny", "--db", str(db), "--run", "1", "--tasks", "a",
                                 "--gate", "turn", "--quantile", "0.5"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert calibrated_tau("tiny", "turn") == pytest.approx(0.4) and load_calibration("tiny")["turn"]["tasks"] == ["a"]
    assert calibrated_tau("tiny", "forward") == pytest.approx(0.5)


def test_calibration_refuses_other_models_and_missing_records(tmp_path: Path) -> None:
    db = _db(tmp_path)
    wrong = runner.invoke(app, ["models", "calibrate", "tiny", "--db", str(db), "--run", "2"])
    assert wrong.exit_code == 1 and "is of model 'big'" in wrong.output
    assert not calibration_path("tiny").exists()  # nothing half-stored
    empty = runner.invoke(app, ["models", "calibrate", "big", "--db", str(db), "--run", "2"])
    assert empty.exit_code == 1 and "nothing calibrated" in empty.output
    bad_gate = runner.invoke(app, ["models", "calibrate", "tiny", "--db", str(db), "--run", "1", "--gate", "x"])
    assert bad_gate.exit_code == 2
    with pytest.raises(typer.BadParameter, match="models calibrate"):
        build_policies(["confkv-turn"], ["tau=calibrated"], model="never-calibrated")
    with pytest.raises(typer.BadParameter, match="needs the model"):
        build_policies(["confkv-turn"], ["tau=calibrated"])
