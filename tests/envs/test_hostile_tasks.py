"""Hostile input, second round (issue 38), for task files: `tasks check` survives absurd id ranges, files that no
parser should touch (deep nesting, latin-1, megabytes) and files that are not files (a FIFO, a device), reporting
each as one failed check instead of hanging, eating memory or stopping the whole run. No browser: every task here is
invalid, so nothing is replayed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOOD = ROOT / "tasks" / "shopping_001.yaml"
MEMORY_CAP = 2 << 30  # address space of the child: the old code needed 21 GB for the id range below
CAP = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_CAP}, {MEMORY_CAP}))\n"


def tasks_check(*args: str, timeout: float = 120, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """`confkv-agent tasks check ...` in a fresh process with its memory capped, so a regression fails this test
    with a MemoryError instead of swapping or waking the OOM killer on a shared machine."""
    boot = f"{CAP}import sys\nfrom cli.main import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", boot, "tasks", "check", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "COLUMNS": str(columns)})  # fmt: skip


def capped_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `code` in a child with the same memory cap (the old `parse_ids` filled all memory in-process)."""
    return subprocess.run([sys.executable, "-c", CAP + code], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def bad_task(folder: Path, name: str, task_id: int) -> Path:
    """A task file that loads but fails validation (an unknown key), so it is reported, never replayed."""
    path = folder / name
    path.write_text(GOOD.read_text().replace("task_id: 1\n", f"task_id: {task_id}\nhint: none\n"))
    return path


def test_a_huge_id_range_is_not_built_in_memory(tmp_path: Path) -> None:
    bad_task(tmp_path, "shopping_005.yaml", 5)
    bad_task(tmp_path, "shopping_006.yaml", 6)
    started = time.monotonic()
    result = tasks_check(str(tmp_path), "--ids", "1-99999999999999,6", "--json")
    assert "MemoryError" not in result.stderr and time.monotonic() - started < 60, result.stderr
    doc = json.loads(result.stdout[result.stdout.index("{"):])
    assert doc["tasks"] == 2 and {f["task_id"] for f in doc["failures"]} == {5, 6}
    assert result.returncode == 1  # the two tasks are invalid
    outside = tasks_check(str(tmp_path), "--ids", "6-99999999999999", "--json")
    assert {f["task_id"] for f in json.loads(outside.stdout[outside.stdout.index("{"):])["failures"]} == {6}


def test_id_ranges_are_lazy_bounded_and_clear() -> None:
    code = """
from envs.check import parse_ids
ids = parse_ids("1,2,10-12, 99999999999999-100000000000000")
assert all(i in ids for i in (1, 2, 10, 11, 12, 100000000000000)) and 3 not in ids and 13 not in ids
assert "x" not in ids and None not in ids  # an invalid file's task_id may be anything
for text in ("1-" + "9" * 30, "9" * 5000, "1,x", "5-"):
    try:
        parse_ids(text)
    except ValueError as exc:
        assert "bad task id" in str(exc) and len(str(exc)) < 200, exc
    else:
        raise AssertionError(text)
print("ok")
"""
    result = capped_python(code)
    assert result.stdout.strip() == "ok", result.stderr[-2000:]


def test_one_unparseable_file_does_not_stop_the_check(tmp_path: Path) -> None:
    (tmp_path / "shopping_010.yaml").write_text("task_id: 10\nintent: " + "[" * 5000 + "\n")  # RecursionError
    (tmp_path / "shopping_011.yaml").write_bytes(GOOD.read_bytes().replace(b"task_id: 1\n", b"task_id: 11\n")
                                                 .replace(b"What is", b"Qu\xe9 est"))  # latin-1, not UTF-8
    (tmp_path / "shopping_012.yaml").write_text("task_id: 12\nx: [" + "1, " * 700_000 + "1]\n")  # 2 MB
    bad_task(tmp_path, "shopping_013.yaml", 13)
    started = time.monotonic()
    result = tasks_check(str(tmp_path), "--json")
    assert time.monotonic() - started < 15, "the 2 MB file was parsed again after loading refused it (~20 s)"
    assert "Traceback" not in result.stderr and result.returncode == 1, result.stderr[-2000:]
    doc = json.loads(result.stdout[result.stdout.index("{"):])
    reasons = {Path(f["task"]).name: " ".join(f["reasons"]) for f in doc["failures"]}
    assert doc["tasks"] == 4 and len(reasons) == 4, doc
    assert "nesting" in reasons["shopping_010.yaml"]
    assert "not UTF-8" in reasons["shopping_011.yaml"]
    assert "at most 1,048,576" in reasons["shopping_012.yaml"]
    assert "hint: unknown key" in reasons["shopping_013.yaml"]


def test_a_fifo_or_a_device_named_yaml_is_refused_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "shopping_020.yaml")  # no writer ever comes: reading it waits forever
    (tmp_path / "shopping_021.yaml").symlink_to("/dev/zero")  # st_size 0, endless bytes
    bad_task(tmp_path, "shopping_022.yaml", 22)
    result = tasks_check(str(tmp_path), "--json", timeout=120)  # a hang never ends; 120 s leaves room for a loaded machine
    assert "MemoryError" not in result.stderr and result.returncode == 1, result.stderr[-2000:]
    doc = json.loads(result.stdout[result.stdout.index("{"):])
    reasons = {Path(f["task"]).name: " ".join(f["reasons"]) for f in doc["failures"]}
    assert "not a regular file (a FIFO)" in reasons["shopping_020.yaml"]
    assert "not a regular file (a character device)" in reasons["shopping_021.yaml"]
    assert "hint: unknown key" in reasons["shopping_022.yaml"]
    run = subprocess.run([sys.executable, "-c", f"{CAP}import sys\nfrom cli.main import main; main(sys.argv[1:])",
                          "run", str(tmp_path / "shopping_020.yaml"), "--policy", "scripted", "--db",
                          str(tmp_path / "t.sqlite")], cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 2 and "not a regular file (a FIFO)" in run.stderr and len(run.stderr) < 400, run.stderr


def test_file_names_and_reasons_are_printed_literally(tmp_path: Path) -> None:
    path = tmp_path / "[red]shopping_030.yaml"  # a file name and a key that are console markup
    path.write_text(GOOD.read_text().replace("task_id: 1\n", 'task_id: 30\n"[/]": none\n'))
    result = tasks_check(str(tmp_path), columns=400)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"FAIL 30 {path} (" in result.stderr  # the progress line
    assert "[red]shopping_030.yaml" in result.stdout and "[/]: unknown key" in result.stdout  # the table


@pytest.mark.parametrize("old, new", [
    ("start_url: __SHOPPING__/", "start_url: __SHOPPING__@127.0.0.1:9/"),  # userinfo: the host becomes 127.0.0.1:9
    ("start_url: __SHOPPING__/", "start_url: __SHOPPING__.evil.example/"),
    ("start_url: __SHOPPING__/", "start_url: __SHOPPING__:9/"),
    ("- stop [$9.95]", "- goto [__SHOPPING__@127.0.0.1:9/]\n- stop [$9.95]"),
])  # fmt: skip
def test_a_placeholder_must_be_followed_by_a_path(tmp_path: Path, old: str, new: str) -> None:
    from envs.taskspec import TaskSpecError, load_task

    path = tmp_path / "shopping_001.yaml"
    path.write_text(GOOD.read_text().replace(old, new))
    with pytest.raises(TaskSpecError) as caught:
        load_task(path)
    message = str(caught.value)
    assert "must be followed by '/', '?', '#' or nothing" in message and len(message.splitlines()) == 1, message


def test_a_webarena_import_refuses_a_fifo_or_a_device_instead_of_reading_it(tmp_path: Path) -> None:
    from envs.taskspec import TaskSpecError
    from envs.webarena_import import load_webarena_json

    fifo = tmp_path / "test.raw.json"
    os.mkfifo(fifo)
    with pytest.raises(TaskSpecError, match=r"refused: not a regular file \(a FIFO\)"):
        load_webarena_json(fifo)  # hung before: read_text waited for a writer
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    with pytest.raises(TaskSpecError, match="refused: not a regular file"):
        load_webarena_json(zero)  # read until MemoryError before
