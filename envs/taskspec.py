"""Task format: pydantic models for `tasks/*.yaml`, a loader with located errors, and a WebArena/VWA JSON importer.

Why this shape: task files are written by hand, so every mistake must point at the file, the key path and, where the
YAML parser knows it, the line ("tasks/shopping_003.yaml: eval.reference_answers.must_include: expected a list, got
str (line 14)"). Pydantic checks types and shape (strict: a quoted "true" is not a bool, 100234 is not a string);
checks that need the whole task (placeholders vs `sites`, task-id ranges, the action grammar) run after it and are
reported the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from envs.safe_yaml import YamlLimitError, load_limited
from envs.server import PLACEHOLDER_RE, expand_url
from envs.sites import SITES
from envs.task_errors import YAML_TYPES, describe, located, short, yaml_line

SiteName = Literal["shopping", "classifieds", "forum"]
EvalType = Literal["string_match", "url_match", "program_html"]

#: Placeholder -> site (from the site registry). Task files never hold real ports; the runner expands these with
#: `Sites.urls`.
PLACEHOLDERS: dict[str, str] = {spec.placeholder: name for name, spec in SITES.items()}
#: task_id ranges by site (single-site tasks) and for cross-site tasks.
ID_RANGES: dict[str, range] = {
    "shopping": range(1, 100),
    "classifieds": range(101, 200),
    "forum": range(201, 300),
    "cross-site": range(301, 400),
}
TAB_SEPARATOR = " |AND| "
OR_SEPARATOR = " |OR| "
NOT_ACHIEVABLE = "N/A"

# The runner's parser of one reference step (raises ValueError on a bad step), e.g. `agent.actions.parse_action`.
StepParser = Callable[[str], object]
#: Caps on free text: a task is a sentence and a few answers; megabytes of it only hang what renders it.
MAX_INTENT_CHARS = 4000
MAX_ANSWER_CHARS = 1000
MAX_LINE_CHARS = 2000  # URLs, locators, reference-solution lines
Answer = Annotated[str, Field(max_length=MAX_ANSWER_CHARS)]
Line = Annotated[str, Field(max_length=MAX_LINE_CHARS)]

_STOP_RE = re.compile(r"^\s*stop\s*\[(.*)\]\s*$", re.DOTALL)
# A placeholder stands for `http://host:port`; what follows it must start a path, query or fragment. Anything else
# rewrites the authority: `__SHOPPING__@127.0.0.1:9/` is user info plus another host, `__SHOPPING__:9` another port.
_PLACEHOLDER_TAIL_RE = re.compile(PLACEHOLDER_RE.pattern + r"(?![/?#]|\s|$)")
_GOTO_RE = re.compile(r"^\s*goto\s*\[(.*)\]\s*$", re.DOTALL)


class TaskSpecError(ValueError):
    """A task file (or several) is invalid; `.errors` holds one located message per problem."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("\n".join(errors))


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class Contents(_Strict):
    """Expected text: `exact_match` (whole cleaned text), `must_include` / `must_exclude` (items may hold
    ` |OR| ` alternatives). Used by string_match (`reference_answers`) and program_html (`required_contents`)."""

    exact_match: Answer | None = None
    must_include: list[Answer] | None = None
    must_exclude: list[Answer] | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> Contents:
        if self.exact_match is None and not self.must_include and not self.must_exclude:
            raise ValueError("needs at least one of exact_match, must_include, must_exclude")
        for name in ("must_include", "must_exclude"):
            if any(not item.strip() for item in getattr(self, name) or []):
                raise ValueError(f"{name} holds an empty string")
        return self

    @property
    def is_not_achievable(self) -> bool:
        """True when the reference says the task cannot be done ("N/A")."""
        refs = [self.exact_match] if self.exact_match is not None else []
        refs += self.must_include or []
        return any(ref.strip().upper() == NOT_ACHIEVABLE for ref in refs)


class HtmlCheck(_Strict):
    """One program_html check: where to look (`url`: "last" or a placeholder URL), what to read (`locator`: ""
    for the page text, else a JS expression), and what it must contain."""

    url: Line
    locator: Line
    required_contents: Contents


class EvalSpec(_Strict):
    eval_types: list[EvalType]
    reference_answers: Contents | None = None
    reference_url: Line | None = None
    url_note: Literal["EXACT", "GOLD in PRED"] = "GOLD in PRED"
    program_html: list[HtmlCheck] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> EvalSpec:
        """Each eval type needs its data, and data without its eval type is a mistake (it would be ignored)."""
        if len(set(self.eval_types)) != len(self.eval_types):
            raise ValueError(f"eval_types has duplicates: {self.eval_types}")
        pairs = (
            ("string_match", "reference_answers", self.reference_answers is not None),
            ("url_match", "reference_url", bool(self.reference_url)),
            ("program_html", "program_html", bool(self.program_html)),
        )
        for eval_type, key, present in pairs:
            if eval_type in self.eval_types and not present:
                raise ValueError(f"eval_types has '{eval_type}' but {key} is missing or empty")
            if present and eval_type not in self.eval_types:
                raise ValueError(f"{key} is given but '{eval_type}' is not in eval_types")
        return self


class Task(_Strict):
    task_id: int = Field(ge=1)
    sites: list[SiteName] = Field(min_length=1, max_length=2)
    intent: str = Field(min_length=1, max_length=MAX_INTENT_CHARS)
    start_url: str = Field(min_length=1, max_length=MAX_LINE_CHARS)
    require_login: bool = False
    require_reset: bool = False
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    memory_span: Literal["short", "long"] = "short"
    eval: EvalSpec
    reference_solution: list[Line] = Field(default_factory=list)
    #: Imported fields with no local meaning (VWA image, viewport_size, ...), kept for the record.
    extra: dict[str, Any] = Field(default_factory=dict)
    #: Set on imported tasks that no local judge can score (e.g. VWA fuzzy_match text); evaluators then score 0.
    not_evaluable: str | None = None
    _source: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _eval_present(self) -> Task:
        if len(set(self.sites)) != len(self.sites):
            raise ValueError(f"sites has duplicates: {self.sites}")
        if not self.eval.eval_types and not self.not_evaluable:
            raise ValueError("eval.eval_types is empty")
        return self

    @property
    def kind(self) -> str:
        """Its one site, or `cross-site`: the key of `ID_RANGES`, and how reports group tasks."""
        return "cross-site" if len(self.sites) > 1 else self.sites[0]

    @property
    def source(self) -> str:
        """The file this task came from (or `task <id>`), for messages."""
        return self._source or f"task {self.task_id}"

    @property
    def is_not_achievable(self) -> bool:
        ref = self.eval.reference_answers
        return ref is not None and ref.is_not_achievable

    def start_urls(self, urls: Mapping[str, str]) -> list[str]:
        """One URL per tab, placeholders expanded with `urls` (placeholder -> base URL, e.g. `Sites.urls`)."""
        return [expand_url(part.strip(), dict(urls)) for part in self.start_url.split(TAB_SEPARATOR)]


# --------------------------------------------------------------------------------------------- checks beyond shape


def _semantic_errors(task: Task, local: bool, parse_step: StepParser | None) -> list[tuple[tuple[Any, ...], str]]:
    """Checks that need the whole task. `local` adds the rules for our own YAML files (id ranges, solutions)."""
    errors: list[tuple[tuple[Any, ...], str]] = []
    urls: list[tuple[tuple[Any, ...], str]] = [(("start_url",), task.start_url)]
    if task.eval.reference_url:
        urls.append((("eval", "reference_url"), task.eval.reference_url))
    urls += [(("eval", "program_html", i, "url"), c.url) for i, c in enumerate(task.eval.program_html)]
    for i, line in enumerate(task.reference_solution):
        if goto := _GOTO_RE.match(line):
            urls.append((("reference_solution", i), goto.group(1)))
    for loc, text in urls:
        for bad in _PLACEHOLDER_TAIL_RE.finditer(text):
            errors.append((loc, f"placeholder {bad.group()} must be followed by '/', '?', '#' or nothing, not "
                                f"{short(text[bad.end():], 20)}: the URL would leave the site"))  # fmt: skip
        for placeholder in PLACEHOLDER_RE.findall(text):
            site = PLACEHOLDERS.get(placeholder)
            if site is None:
                errors.append((loc, f"unknown placeholder {placeholder} (known: {', '.join(PLACEHOLDERS)})"))
            elif site not in task.sites:
                errors.append((loc, f"placeholder {placeholder} names site '{site}', not in sites {task.sites}"))
    for i, check in enumerate(task.eval.program_html):
        for key in ("url", "locator"):
            if getattr(check, key).startswith("func:"):
                errors.append((("eval", "program_html", i, key), "func: helpers (WebArena Python) are not supported"))
    if not local:
        return errors
    for i, part in enumerate(task.start_url.split(TAB_SEPARATOR)):
        if not any(part.strip().startswith(p) for p in PLACEHOLDERS):
            errors.append((("start_url",), f"tab {i} {short(part.strip())} must start with a site placeholder"))
    id_range = ID_RANGES[task.kind]
    if task.task_id not in id_range:
        bounds = f"{id_range.start}-{id_range.stop - 1}"
        errors.append((("task_id",), f"{task.task_id} is outside the {task.kind} range {bounds}"))
    errors += _solution_errors(task, parse_step)
    return errors


def _solution_errors(task: Task, parse_step: StepParser | None) -> list[tuple[tuple[Any, ...], str]]:
    """The reference solution must end with `stop` where an answer is judged, and parse with `parse_step` (the
    runner's action grammar, e.g. `agent.actions.parse_action`; envs does not know the grammar) when given."""
    steps = task.reference_solution
    if not steps:
        return [(("reference_solution",), "is empty: every task ships a solution")]
    errors: list[tuple[tuple[Any, ...], str]] = []
    for i, line in enumerate(steps):
        try:
            if parse_step is not None:
                parse_step(line)
        except ValueError as exc:
            errors.append((("reference_solution", i), f"{short(line)}: {exc}"))
        if _STOP_RE.match(line) and i != len(steps) - 1:
            errors.append((("reference_solution", i), "stop must be the last action"))
    if "string_match" in task.eval.eval_types and not _STOP_RE.match(steps[-1]):
        errors.append((("reference_solution",), "string_match tasks must end with 'stop [answer]'"))
    return errors


def build_task(
    data: Any, source: str, local: bool, node: yaml.Node | None = None, parse_step: StepParser | None = None
) -> Task:
    """Validate one task mapping (`local`: our YAML rules too); raise TaskSpecError with every located problem."""
    if not isinstance(data, dict):
        raise TaskSpecError([f"{source}: expected a mapping of task keys, got {YAML_TYPES.get(type(data).__name__)}"])
    try:
        task = Task.model_validate(data)
    except ValidationError as exc:
        raise TaskSpecError(
            [located(source, tuple(e["loc"]), describe(e), yaml_line(node, tuple(e["loc"]))) for e in exc.errors()]
        ) from None
    task._source = source
    problems = _semantic_errors(task, local, parse_step)
    if problems:
        raise TaskSpecError([located(source, loc, msg, yaml_line(node, loc)) for loc, msg in problems])
    return task


# ------------------------------------------------------------------------------------------------------ loaders


def load_task(path: str | Path, parse_step: StepParser | None = None) -> Task:
    """Load and validate one YAML task file (errors name the file, key path and line); `parse_step` checks each
    reference step in the runner's action grammar."""
    path = Path(path)
    try:
        node, data = load_limited(path)
    except YamlLimitError as exc:
        raise TaskSpecError([f"{path}: refused: {exc}"]) from None
    except RecursionError:
        raise TaskSpecError([f"{path}: refused: YAML nesting too deep"]) from None
    except OSError as exc:
        raise TaskSpecError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise TaskSpecError([f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise TaskSpecError([f"{path}{where}: malformed YAML: {short(problem, 200)}"]) from None
    return build_task(data, str(path), local=True, node=node, parse_step=parse_step)


def task_files(dir_or_files: str | Path | Iterable[str | Path]) -> list[Path]:
    """Expand directories to their `*.yaml` / `*.yml` files (sorted); keep files as given."""
    items = [dir_or_files] if isinstance(dir_or_files, str | Path) else list(dir_or_files)
    files: list[Path] = []
    for item in map(Path, items):
        if item.is_dir():
            files += sorted(p for p in item.iterdir() if p.suffix in (".yaml", ".yml"))
        elif item.exists():
            files.append(item)
        else:
            raise TaskSpecError([f"{item}: no such file or directory"])
    return files


def validate_files(
    files: Iterable[Path], parse_step: StepParser | None = None
) -> list[tuple[Path, Task | None, list[str]]]:
    """Validate each file and task-id uniqueness across all of them; one (path, task or None, errors) per file.

    The checker uses this to report every bad file at once instead of stopping at the first."""
    results: list[tuple[Path, Task | None, list[str]]] = []
    seen: dict[int, Path] = {}
    for path in files:
        try:
            task = load_task(path, parse_step)
        except TaskSpecError as exc:
            results.append((path, None, exc.errors))
            continue
        if task.task_id in seen:
            results.append((path, None, [f"{path}: task_id: {task.task_id} is already used by {seen[task.task_id]}"]))
            continue
        seen[task.task_id] = path
        results.append((path, task, []))
    return results


def load_tasks(dir_or_files: str | Path | Iterable[str | Path], parse_step: StepParser | None = None) -> list[Task]:
    """Load every task of a directory (or the given files), sorted by task_id; raise listing every problem."""
    results = validate_files(task_files(dir_or_files), parse_step)
    errors = [msg for _, _, errs in results for msg in errs]
    if errors:
        raise TaskSpecError(errors)
    return sorted((task for _, task, _ in results if task is not None), key=lambda t: t.task_id)


__all__ = [
    "PLACEHOLDERS",
    "Contents",
    "EvalSpec",
    "HtmlCheck",
    "Task",
    "TaskSpecError",
    "load_task",
    "load_tasks",
    "task_files",
    "validate_files",
]
