"""Hostile input, second round (issue 38), on the command line: terminal escapes in user text are shown, not sent;
absurd ids are one-line errors; Ctrl-C and a full disk say what happened."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli.main import app

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tasks" / "shopping_001.yaml"
runner = CliRunner()
# Retitle the window, red background, clear the screen, and the one-byte C1 CSI (U+009B) some terminals obey too.
ESCAPES = ("\x1b]0;pwned\x07", "\x1b[41m", "\x1b[2J", "\x9b31m")
HOSTILE = "".join(ESCAPES)


def _assert_shown_not_sent(text: str) -> None:
    for seq in ESCAPES:
        assert seq not in text
    assert "\\x1b]0;pwned\\x07" in text and "\\x1b[2J" in text


def test_escape_sequences_reach_the_run_screen_shown_not_sent(tmp_path: Path, monkeypatch) -> None:
    from cli.run import LiveView, _print_result
    from runner import worker
    from runner.episode import EpisodeResult
    from traces.records import DecodeToken, StepRecord

    task = tmp_path / "shopping_001.yaml"
    task.write_text(TASK.read_text().replace("intent: What is", 'intent: "\\e]0;pwned\\a\\e[41m\\e[2J What is')
                    .replace("Mug?\n", 'Mug?"\n'), encoding="utf-8")  # fmt: skip

    class Stop(Exception):
        pass

    def no_worker(*args: object, **kwargs: object) -> None:
        raise Stop  # the intent line is printed; the sites and the browser are not needed to see it

    monkeypatch.setattr(worker, "Worker", no_worker)
    result = runner.invoke(app, ["run", str(task), "--policy", "scripted", "--db", str(tmp_path / "t.sqlite")])
    assert isinstance(result.exception, Stop), result.output
    assert "What is the price" in result.output
    for seq in ESCAPES[:3]:
        assert seq not in result.output
    assert "\\x1b]0;pwned\\x07\\x1b[41m\\x1b[2J What is" in result.output

    # the live table (model output and errors) and the result lines (answer, evaluator reason)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=300)
    view = LiveView("t")
    view.add(StepRecord(0, raw_output=f"stop [{HOSTILE}]", action=f"stop [{HOSTILE}]", exec_error=HOSTILE),
             [DecodeToken(0, "t", 0.5, 1, 1, 1)])  # fmt: skip
    view.add(StepRecord(1, raw_output=f"oops {HOSTILE}", parse_error=f"bad {HOSTILE}"), [])
    console.print(view)
    _print_result(console, EpisodeResult(1, 1, "scripted", "done", False, 0.0, answer=HOSTILE,
                                         reason=f"must_include '9.95' not found in answer '{HOSTILE}'",
                                         stop_reason=f"stop {HOSTILE}", blocked=[f"http://x/{HOSTILE}"]))  # fmt: skip
    _assert_shown_not_sent(out.getvalue())


def test_ids_beyond_sqlite_integers_are_one_line_errors(tmp_path: Path) -> None:
    from traces.store import TraceStore

    db = tmp_path / "t.sqlite"
    with TraceStore(db) as store:
        ep = store.start_episode(store.start_run("m", "full"), "1")
        store.finish_episode(ep, success=True)
    huge = "1" + "0" * 23  # 1e23 written out: Python reads it as an int, SQLite cannot bind it
    for args in (["report", "--out", str(tmp_path / "plots"), "--episode", huge], ["traces", "ls", "--run", huge],
                 ["traces", "summary", "--run", huge], ["traces", "breakdown", "--run", huge],
                 ["traces", "compare", "1", huge], ["traces", "compare", "1", "9" * 5000], ["replay", huge]):  # fmt: skip
        result = runner.invoke(app, [*args, "--db", str(db)])
        assert result.exit_code == 1, (args, result.output)
        assert not isinstance(result.exception, OverflowError | ValueError), (args, result.exception)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "ids go from 1 to 9,223,372,036,854,775,807" in lines[0], (args, result.output)
    assert not (tmp_path / "plots").exists()


def _interrupted_check(tmp_path: Path, then: str) -> subprocess.CompletedProcess[str]:
    """`tasks check` whose Ctrl-C is swallowed on the way up, as when it lands while Playwright's driver (killed by
    the same signal) is being closed; `then` is what the check does next: return a clean result, or fail with the
    dead driver's error."""
    boot = ("import os, signal, sys, time\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)  # a background runner inherits it ignored\n"
            "import runner.task_check\n"
            "from envs.check import TaskCheck\n"
            "def check_tasks(selection, progress=None):\n"
            "    try:\n"
            "        os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
            "    except BaseException:  # noqa: BLE001 - what a browser close used to do\n"
            "        pass\n"
            f"    {then}\n"
            "runner.task_check.check_tasks = check_tasks\n"
            "from cli.main import main; main(sys.argv[1:])")  # fmt: skip
    return subprocess.run([sys.executable, "-c", boot, "tasks", "check", str(TASK)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize("then", [
    "return [TaskCheck(path='t.yaml', task_id=1, valid=True, reference_pass=True, negative_fail=True)]",
    "raise RuntimeError('Connection closed while reading from the driver')",
])  # fmt: skip
def test_ctrl_c_swallowed_on_the_way_up_still_ends_the_command_with_130(tmp_path: Path, then: str) -> None:
    result = _interrupted_check(tmp_path, then)
    assert result.returncode == 130, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("interrupted; rerun the same command to resume") and "Traceback" not in result.stderr


def test_ctrl_c_during_a_browser_close_is_passed_on_after_the_cleanup(monkeypatch) -> None:
    from runner import browser
    session = browser.BrowserSession(["http://127.0.0.1:1"])  # never started: only the close path runs
    closed: list[str] = []

    class Context:
        def close(self) -> None:
            closed.append("context")
            raise KeyboardInterrupt  # Ctrl-C while the driver shuts the context

    class Browser:
        def close(self) -> None:  # must not be called: after an interrupt the driver may never answer
            closed.append("browser")

    session._context, session._browser, session._pw = Context(), Browser(), object()  # type: ignore[assignment]
    monkeypatch.setattr(browser, "_release_playwright", lambda graceful=True: closed.append(f"driver {graceful}"))
    with pytest.raises(KeyboardInterrupt):
        session.close()
    assert closed == ["context", "driver False"] and session._pw is None


@pytest.mark.parametrize("error", [
    "FULL",  # what SQLite raises when a write finds no space (made real here with max_page_count)
    "OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))",  # a screenshot or report PNG on a full disk
])  # fmt: skip
def test_a_full_disk_is_not_reported_as_a_damaged_database(tmp_path: Path, error: str) -> None:
    from traces.store import TraceStore

    db = tmp_path / "t.sqlite"
    TraceStore(db).close()
    boot = ("import errno, os, sqlite3, sys\n"
            "c = sqlite3.connect(':memory:'); c.execute('create table t(x)'); c.execute('pragma max_page_count=3')\n"
            "try:\n"
            "    c.execute('insert into t values (zeroblob(100000))')\n"
            "except sqlite3.OperationalError as exc:\n"
            "    FULL = exc\n"
            "import traces.queries\n"
            "def episodes(self, **kwargs):\n"
            f"    raise {error}\n"
            "traces.queries.TraceQueries.episodes = episodes\n"
            "from cli.main import main; main(sys.argv[1:])")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", boot, "traces", "ls", "--db", str(db)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: the disk is full") and "damaged" not in lines[0], lines[0]
