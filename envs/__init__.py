"""envs: the three self-hosted sites, the task format and the evaluators."""

from pathlib import Path

#: The suite's own task folder (the 75 tasks), where commands look when given none.
TASKS_DIR = Path(__file__).resolve().parents[1] / "tasks"
