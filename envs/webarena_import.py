"""Import (Visual)WebArena JSON task configs into our `Task` model.

Why: the issue asks for a loader that also reads WebArena/VWA configs, so their tasks can be mapped onto our sites
(reddit -> forum) and judged by our evaluators. What has no local meaning is kept, not lost:
- VWA fields `image`, `viewport_size`, `*_difficulty`, `comments`, `geolocation`, `storage_state`, `intent_template*`,
  `instantiation_dict` go to `task.extra` (`overall_difficulty` also sets `difficulty`).
- `fuzzy_match` calls a hosted LLM judge in VWA; we have none. A list becomes a `must_include` fallback (recorded in
  `extra["fuzzy_match"]`); "N/A" becomes `exact_match: "N/A"` (our N/A rule judges it); any other value marks the
  task `not_evaluable` with the reason. `one_of` becomes one `must_include` item of ` |OR| ` alternatives.
- `program_html` checks whose url/locator use `func:` helpers, or with `prep_actions`, and `page_image_query`, cannot
  run here: they are dropped (kept in `extra`) and the task is marked `not_evaluable` when nothing judgeable is left.
Imported tasks have no reference solution and skip our id-range rule; their memory_span defaults to "short".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envs.safe_yaml import YamlLimitError, read_capped
from envs.taskspec import NOT_ACHIEVABLE, OR_SEPARATOR, Task, TaskSpecError, build_task

#: WebArena site name -> ours (None: no local counterpart).
SITE_MAP: dict[str, str | None] = {"shopping": "shopping", "classifieds": "classifieds", "reddit": "forum",
                                   "shopping_admin": None, "gitlab": None, "map": None, "wikipedia": None}
PLACEHOLDER_MAP = {"__REDDIT__": "__FORUM__", "__SHOPPING__": "__SHOPPING__", "__CLASSIFIEDS__": "__CLASSIFIEDS__"}
_CORE = {"task_id", "sites", "intent", "start_url", "require_login", "require_reset", "eval"}
_DIFFICULTIES = {"easy", "medium", "hard"}


def _map_placeholders(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    for theirs, ours in PLACEHOLDER_MAP.items():
        text = text.replace(theirs, ours)
    return text


def _answers(ref: dict[str, Any], extra: dict[str, Any], reasons: list[str]) -> dict[str, Any] | None:
    out = {k: ref[k] for k in ("exact_match", "must_include", "must_exclude") if ref.get(k) not in (None, [], "")}
    fuzzy = ref.get("fuzzy_match")
    if fuzzy not in (None, [], ""):
        extra["fuzzy_match"] = fuzzy
        if isinstance(fuzzy, list):
            out["must_include"] = list(out.get("must_include", [])) + [str(x) for x in fuzzy]
        elif isinstance(fuzzy, str) and fuzzy.strip().upper() == NOT_ACHIEVABLE:
            out.setdefault("exact_match", NOT_ACHIEVABLE)
        else:
            reasons.append(f"fuzzy_match {fuzzy!r} needs an LLM judge (none locally)")
    if ref.get("one_of"):
        out["must_include"] = list(out.get("must_include", [])) + [OR_SEPARATOR.join(map(str, ref["one_of"]))]
    if ref.get("required_values"):
        extra["required_values"] = ref["required_values"]
        reasons.append("required_values has no local judge")
    if isinstance(out.get("exact_match"), int | float):
        out["exact_match"] = str(out["exact_match"])
    for key in ("must_include", "must_exclude"):
        if key in out:
            out[key] = [str(x) for x in out[key]]
    return out or None


def _html_checks(checks: list[dict[str, Any]], extra: dict[str, Any], reasons: list[str]) -> list[dict[str, Any]]:
    kept, dropped = [], []
    for check in checks:
        url, locator = str(check.get("url", "")), str(check.get("locator", ""))
        if url.startswith("func:") or locator.startswith("func:") or check.get("prep_actions"):
            dropped.append(check)
            continue
        contents = dict(check.get("required_contents") or {})
        for key in ("must_include", "must_exclude"):
            if key in contents:
                contents[key] = [str(x) for x in contents[key]]
        kept.append({"url": _map_placeholders(url), "locator": locator, "required_contents": contents})
    if dropped:
        extra["program_html_dropped"] = dropped
        reasons.append(f"{len(dropped)} program_html check(s) use func:/prep_actions helpers")
    return kept


def _eval(raw: dict[str, Any], extra: dict[str, Any], reasons: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"eval_types": []}
    for eval_type in raw.get("eval_types") or []:
        if eval_type == "string_match" and raw.get("reference_answers"):
            answers = _answers(raw["reference_answers"], extra, reasons)
            if answers:
                out["reference_answers"] = answers
                out["eval_types"].append(eval_type)
        elif eval_type == "url_match" and raw.get("reference_url"):
            out["reference_url"] = _map_placeholders(raw["reference_url"])
            out["url_note"] = raw.get("url_note") or "GOLD in PRED"
            out["eval_types"].append(eval_type)
        elif eval_type == "program_html" and raw.get("program_html"):
            checks = _html_checks(raw["program_html"], extra, reasons)
            if checks:
                out["program_html"] = checks
                out["eval_types"].append(eval_type)
        else:
            reasons.append(f"eval type {eval_type!r} has no local judge or no reference data")
    return out


def from_webarena(config: dict[str, Any], source: str | None = None) -> Task:
    """Build a Task from one WebArena/VWA config dict (see the module docstring for the mapping)."""
    task_id = config.get("task_id", "?")
    source = source or f"webarena task {task_id}"
    sites = []
    for site in config.get("sites") or []:
        if SITE_MAP.get(site) is None:
            served = sorted(s for s in SITE_MAP.values() if s)
            raise TaskSpecError([f"{source}: sites: '{site}' has no local counterpart (we serve {served})"])
        sites.append(SITE_MAP[site])
    extra = {k: v for k, v in config.items() if k not in _CORE}
    reasons: list[str] = []
    data: dict[str, Any] = {
        "task_id": task_id,
        "sites": sites,
        "intent": config.get("intent"),
        "start_url": _map_placeholders(config.get("start_url")),
        "require_login": bool(config.get("require_login", False)),
        "require_reset": bool(config.get("require_reset", False)),
        "eval": _eval(config.get("eval") or {}, extra, reasons),
        "extra": extra,
    }
    if config.get("overall_difficulty") in _DIFFICULTIES:
        data["difficulty"] = config["overall_difficulty"]
    if reasons:  # judging only part of a task would be too lenient: mark it whole
        data["not_evaluable"] = "; ".join(reasons)
    return build_task(data, source, local=False)


MAX_JSON_BYTES = 64 << 20  # WebArena's test.raw.json (812 configs) is ~0.8 MB


def load_webarena_json(path: str | Path) -> list[Task]:
    """Read a WebArena/VWA JSON file (a list of configs, or one config); raise listing every bad task."""
    path = Path(path)
    try:
        raw = json.loads(read_capped(path, MAX_JSON_BYTES))  # a FIFO or /dev/zero named *.json is refused, not read
    except json.JSONDecodeError as exc:
        raise TaskSpecError([f"{path}:{exc.lineno}: malformed JSON: {exc.msg}"]) from None
    except (YamlLimitError, UnicodeDecodeError) as exc:
        raise TaskSpecError([f"{path}: refused: {exc}"]) from None
    configs = raw if isinstance(raw, list) else [raw]
    tasks, errors = [], []
    for i, config in enumerate(configs):
        if not isinstance(config, dict):
            errors.append(f"{path}[{i}]: expected a task object, got {type(config).__name__}")
            continue
        try:
            tasks.append(from_webarena(config, source=f"{path}[{i}] (task_id {config.get('task_id', '?')})"))
        except TaskSpecError as exc:
            errors += exc.errors
    if errors:
        raise TaskSpecError(errors)
    return tasks
