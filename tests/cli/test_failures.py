"""Hostile-but-fair CLI use: every failure is one line on stderr and a non-zero exit, never a traceback; bad model
paths and databases are refused before any run row exists; Ctrl-C and SIGTERM clean up and say how to resume."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli.main import app
from cli.run import LiveView
from traces.records import DecodeToken, StepRecord
from traces.store import TraceStore

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tasks" / "shopping_001.yaml"
runner = CliRunner()


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real entry point in a fresh process (what a user runs), not typer's test runner."""
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})  # fmt: skip


def assert_one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr


@pytest.fixture
def scripted_db(tmp_path: Path) -> Path:
    db = tmp_path / "t.sqlite"
    with TraceStore(db) as store:
        run = store.start_run("scripted", "scripted", {"agent": "reference_solution"})
        for task, ok in (("1", True), ("2", False)):
            ep = store.start_episode(run, task)
            store.add_step(ep, step=0, action="stop [x]")
            store.finish_episode(ep, success=ok)
    return db


@pytest.mark.parametrize("kind", ["random file", "random .gguf", "empty folder"])
def test_bad_model_path_is_refused_before_any_run_row(tmp_path: Path, kind: str) -> None:
    path = tmp_path / {"random file": "weights", "random .gguf": "m.gguf", "empty folder": "model"}[kind]
    if kind == "empty folder":
        path.mkdir()
    else:
        path.write_bytes(os.urandom(4096))
    db = tmp_path / "t.sqlite"
    result = runner.invoke(app, ["run", str(TASK), "--model", str(path), "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "not a GGUF model file" in result.output or "no config.json" in result.output, result.output
    assert not db.exists()


def test_report_out_existing_file_and_huge_replay_id(scripted_db: Path, tmp_path: Path) -> None:
    existing = tmp_path / "plots"
    existing.write_text("not a folder")
    assert_one_line_error(cli("report", "--out", str(existing), "--db", str(scripted_db)), "is an existing file")
    assert_one_line_error(cli("replay", "99999999999999999999", "--db", str(scripted_db)), "no episode")


def test_damaged_and_foreign_databases(scripted_db: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.sqlite"
    data = bytearray(scripted_db.read_bytes())
    page = 4096
    data[page * 2 : page * 3] = os.urandom(page)  # one page of random bytes inside a real database
    damaged.write_bytes(bytes(data))
    assert_one_line_error(cli("traces", "ls", "--db", str(damaged)), "damaged")
    debug = cli("--debug", "traces", "ls", "--db", str(damaged))
    assert debug.returncode != 0 and "Traceback" in debug.stderr  # --debug shows it
    text = tmp_path / "notes.txt"
    text.write_text("my notes, not a database\n")
    for command in (["run", str(TASK), "--policy", "scripted"], ["eval", str(TASK), "--policies", "scripted"]):
        result = cli(*command, "--db", str(text))
        assert_one_line_error(result, "is not an SQLite database")
        assert result.returncode == 2
    assert text.read_text() == "my notes, not a database\n"  # nothing was written into it


def test_report_on_scripted_only_episodes_reports_them(scripted_db: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "--db", str(scripted_db), "--out", str(tmp_path / "png")])
    assert result.exit_code == 0, result.output
    assert "no finished episodes" not in result.output
    assert (tmp_path / "png" / "success_by_policy.png").stat().st_size > 1000


def test_a_5mb_intent_is_refused_at_once_and_long_text_is_clipped_on_screen(tmp_path: Path) -> None:
    text = TASK.read_text(encoding="utf-8")
    intent_line = next(line for line in text.splitlines() if line.startswith("intent:"))
    huge = tmp_path / "shopping_050.yaml"
    huge.write_text(text.replace(intent_line, f'intent: "{"buy a mug " * 500_000}"'), encoding="utf-8")
    started = time.monotonic()
    result = runner.invoke(app, ["run", str(huge), "--policy", "scripted", "--db", str(tmp_path / "t.sqlite")])
    assert result.exit_code == 2 and "at most 1,048,576" in result.output and len(result.output) < 400
    long_intent = tmp_path / "shopping_051.yaml"
    long_intent.write_text(text.replace(intent_line, f'intent: "{"buy a mug " * 1000}"'), encoding="utf-8")
    result = runner.invoke(app, ["run", str(long_intent), "--policy", "scripted", "--db", str(tmp_path / "t.sqlite")])
    assert result.exit_code == 2 and "intent: text is 10,000 characters; at most 4,000" in result.output
    assert time.monotonic() - started < 60  # (not a speed target: the old code took minutes, then hung)
    # what reaches the screen from a model is clipped too: a 200 KB `type` action renders as a short row
    view = LiveView("t")
    view.add(StepRecord(0, url="u", raw_output="r", action="type [3] [" + "x" * 200_000 + "]", step_ms=100),
             [DecodeToken(0, "t", 0.5, 1, 1, 1)])
    console = Console(record=True, width=120, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(view)
    assert len(console.export_text()) < 3000


def _wait_for_marker(marker: Path, proc: subprocess.Popen[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the eval never reached its first step"
        time.sleep(0.1)


@pytest.mark.browser
@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_signals_clean_up_and_say_how_to_resume(tmp_path: Path, sig: int, code: int, word: str) -> None:
    import tempfile

    # a short TMPDIR: Chromium's profile socket lives there and unix socket paths are limited to 108 bytes
    tmp = Path(tempfile.mkdtemp(prefix="confkv-sig-", dir="/tmp"))
    try:
        _interrupt_an_eval(tmp, tmp_path / "t.sqlite", sig, code, word)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def _interrupt_an_eval(tmp: Path, db: Path, sig: int, code: int, word: str) -> None:
    # a runner started in the background inherits SIGINT as ignored: give the child Python's Ctrl-C handler back.
    # The scripted agent's first step is held (it touches a marker, then sleeps), so the signal always lands inside
    # an episode: a fixed sleep raced a fast machine, where the whole episode ended before the signal came.
    marker = tmp / "in-step"
    boot = "import signal, sys, time; from pathlib import Path; signal.signal(signal.SIGINT, signal.default_int_handler)\n" \
           "from agent.model_policy import ScriptedAgent\n" \
           "act = ScriptedAgent.act\n" \
           "def held(self, *a):\n" \
           f"    Path({str(marker)!r}).touch(); time.sleep(120); return act(self, *a)\n" \
           "ScriptedAgent.act = held\n" \
           "from cli.main import main; main(sys.argv[1:])"  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", boot, "eval", str(TASK), "--policies", "scripted", "--db",
                             str(db)], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for_marker(marker, proc)
    assert list(tmp.glob("confkv-live-*"))  # the sites are up, so the cleanup below is tested
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err and f"{word}; rerun the same command to resume" in err
    assert list(tmp.glob("confkv-live-*")) == []
    conn = sqlite3.connect(db)
    statuses = [r[0] for r in conn.execute("select status from episodes")]
    conn.close()
    assert statuses == ["error"]  # the interrupted episode was closed (and will be rerun)


@pytest.mark.browser
def test_duplicate_policies_run_once(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"
    result = cli("eval", str(TASK), "--policies", "scripted,scripted", "--db", str(db), "--json")
    assert result.returncode == 0, result.stderr
    assert "1 episodes to run" in result.stderr
    with TraceStore.open_existing(db) as store:
        assert len(store.episodes()) == 1
