"""Task evaluators with (Visual)WebArena semantics: string_match, url_match, program_html. Scores multiply.

Every evaluator returns `EvalResult(score, reason)`; the reason says what matched or what was missing, so a failed
episode can be understood without re-running it.

Matching rules (shared by string_match answers and program_html page text):
1. Cleaning (VWA): strip whitespace, strip one pair of surrounding quotes, lowercase; whitespace runs become one space.
2. Numbers are normalized before comparing: a currency sign ($, EUR sign, GBP sign) right before a number is dropped,
   thousands separators in groups of three are removed and trailing fractional zeros are dropped. So "$25,000",
   "25000", "25,000.00" and "25000.0" all read "25000", and "$0.00" reads "0" (one of VWA's known disputes, settled
   as equal). Leading zeros are kept ("007" stays "007": ids are not quantities). Signs are not parsed.
3. A reference matches only as whole tokens: it may not touch a letter or digit on either side, and a number may not
   continue into a decimal part. So "0" does not match inside "100" nor "0.5", "mug" not inside "mugs", but
   "100234" matches "Order #100234." (VWA tokenizes one-word references; we apply the same edge rule to phrases.)
4. `must_include`: every item must match; an item's ` |OR| ` alternatives need one to match. `must_exclude`: no
   alternative of any item may match. `exact_match`: the whole cleaned, normalized text equals the reference.
5. "N/A" as a reference means the task is unachievable: the answer must be N/A ("n/a", optionally followed by an
   explanation after a non-alphanumeric character, e.g. "N/A: no such order").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from envs.server import expand_url
from envs.taskspec import NOT_ACHIEVABLE, OR_SEPARATOR, Contents, HtmlCheck, Task

#: JS read when a program_html locator is "" (the whole visible page text).
PAGE_TEXT_JS = "document.body.innerText"

_NUMBER_RE = re.compile(r"(?<![\w.])(?:[$\u20ac\u00a3]\s?)?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?!\w)")
_QUOTES = ("'", '"')


@dataclass(frozen=True)
class EvalResult:
    score: float
    reason: str

    @property
    def passed(self) -> bool:
        return self.score >= 1.0


def clean_answer(text: str) -> str:
    """VWA answer cleaning: strip, drop one pair of surrounding quotes, lowercase, collapse whitespace."""
    text = text.strip()
    for quote in _QUOTES:
        if len(text) >= 2 and text.startswith(quote) and text.endswith(quote):
            text = text[1:-1].strip()
    return " ".join(text.lower().split())


def _canonical_number(match: re.Match[str]) -> str:
    integer, fraction = match.group(1).replace(",", ""), (match.group(2) or "").rstrip("0")
    return integer + (fraction if fraction != "." else "")


def normalize(text: str) -> str:
    """Cleaned text with numbers in canonical form (rules 1-2 of the module docstring)."""
    return _NUMBER_RE.sub(_canonical_number, clean_answer(text))


def contains(reference: str, text: str) -> bool:
    """True if `reference` occurs in `text` as whole tokens, after normalizing both (rules 1-3)."""
    ref, hay = normalize(reference), normalize(text)
    if not ref:
        return False
    pattern = r"(?<!\w)(?<!\d\.)" + re.escape(ref) + r"(?!\w)(?!\.\d)"
    return re.search(pattern, hay) is not None


def is_not_achievable_answer(answer: str) -> bool:
    """True for "N/A", "n/a", "N/A: reason" (rule 5)."""
    return re.match(r"n/a(?![\w])", clean_answer(answer)) is not None


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _alternatives(item: str) -> list[str]:
    return [alt.strip() for alt in item.split(OR_SEPARATOR)]


def check_contents(contents: Contents, text: str, what: str) -> EvalResult:
    """Apply exact_match / must_include / must_exclude to `text`; `what` names it in reasons ("answer", ".price")."""
    failures: list[str] = []
    shown = f"{what} '{_short(text)}'"
    if contents.exact_match is not None:
        ref = contents.exact_match
        if ref.strip().upper() == NOT_ACHIEVABLE:
            ok = is_not_achievable_answer(text)
        else:
            ok = normalize(ref) == normalize(text)
        if not ok:
            failures.append(f"exact_match '{ref}' != {shown}")
    for item in contents.must_include or []:
        alternatives = _alternatives(item)
        if any(alt.upper() == NOT_ACHIEVABLE for alt in alternatives) and is_not_achievable_answer(text):
            continue
        if not any(contains(alt, text) for alt in alternatives):
            failures.append(f"must_include '{item}' not found in {shown}")
    for item in contents.must_exclude or []:
        found = [alt for alt in _alternatives(item) if contains(alt, text)]
        if found:
            failures.append(f"must_exclude '{found[0]}' found in {shown}")
    if failures:
        return EvalResult(0.0, "; ".join(failures))
    return EvalResult(1.0, f"{what} matches")


def string_match(answer: str | None, reference: Contents) -> EvalResult:
    """Judge the final `stop [answer]` text against the reference answers."""
    if answer is None:
        return EvalResult(0.0, "no answer: the episode ended without 'stop [answer]'")
    return check_contents(reference, answer, "answer")


def _url_parts(url: str) -> tuple[str, list[tuple[str, str]]]:
    parts = urlsplit(url.strip())
    base = f"{parts.scheme.lower()}://{parts.netloc.lower()}{unquote(parts.path).rstrip('/')}"
    return base, sorted(parse_qsl(parts.query, keep_blank_values=True))


def url_match(url: str | None, reference_url: str, url_note: str = "GOLD in PRED",
              urls: Mapping[str, str] | None = None) -> EvalResult:
    """Compare the final page URL with the reference (` |OR| ` alternatives, placeholders expanded with `urls`).

    Both sides: scheme and host lowercased, path unquoted, trailing slash and fragment ignored, query parameters
    compared as an unordered multiset. EXACT: same path and same parameters. GOLD in PRED: same path and every
    reference parameter present in the URL (extra parameters such as paging are allowed)."""
    if not url:
        return EvalResult(0.0, "no final URL to compare")
    base, query = _url_parts(url)
    for ref in _alternatives(reference_url):
        ref_base, ref_query = _url_parts(expand_url(ref, dict(urls or {})))
        if ref_base != base:
            continue
        if url_note == "EXACT" and ref_query == query:
            return EvalResult(1.0, f"url '{url}' equals '{ref}'")
        if url_note != "EXACT" and all(ref_query.count(p) <= query.count(p) for p in ref_query):
            return EvalResult(1.0, f"url '{url}' contains '{ref}'")
    return EvalResult(0.0, f"url '{url}' does not match reference '{reference_url}' ({url_note})")


def _read(page: Any, locator: str) -> tuple[str, str | None]:
    """Evaluate a locator in the page; a missing element (JS error) reads as "" (as in VWA), with the error kept."""
    try:
        value = page.evaluate(locator.strip() or PAGE_TEXT_JS)
    except Exception as exc:  # playwright.Error: a querySelector that found nothing, a syntax error, ...
        return "", str(exc).splitlines()[0]
    return ("" if value is None else str(value)), None


def program_html(page: Any, checks: list[HtmlCheck], urls: Mapping[str, str] | None = None) -> EvalResult:
    """Run each check in the browser after the episode: "last" reads the current page, a URL is opened first.

    "last" checks run before any navigation so they all see the page the agent ended on."""
    if page is None:
        return EvalResult(0.0, "program_html needs the browser page")
    reasons: list[str] = []
    score = 1.0
    ordered = sorted(checks, key=lambda c: c.url != "last")
    for check in ordered:
        where = "last page"
        if check.url != "last":
            where = expand_url(check.url, dict(urls or {}))
            page.goto(where, wait_until="load")
        text, error = _read(page, check.locator)
        what = f"{check.locator or 'page text'} on {where}"
        result = check_contents(check.required_contents, text, what)
        if error and result.score < 1.0:
            result = EvalResult(0.0, f"{result.reason} (locator error: {_short(error, 160)})")
        score *= result.score
        reasons.append(result.reason)
    return EvalResult(score, "; ".join(reasons))


def evaluate(task: Task, answer: str | None, page: Any = None, urls: Mapping[str, str] | None = None) -> EvalResult:
    """Score one finished episode: `answer` from `stop [answer]` (None if none), `page` the active Playwright page
    (its URL is the final URL; program_html runs in it), `urls` placeholder -> base URL (`Sites.urls`)."""
    if task.not_evaluable:
        return EvalResult(0.0, f"not evaluable: {task.not_evaluable}")
    spec, score, reasons = task.eval, 1.0, []
    final_url = page.url if page is not None else None  # before program_html navigates away
    for eval_type in spec.eval_types:
        if eval_type == "string_match":
            assert spec.reference_answers is not None  # guaranteed by EvalSpec
            result = string_match(answer, spec.reference_answers)
        elif eval_type == "url_match":
            assert spec.reference_url is not None
            result = url_match(final_url, spec.reference_url, spec.url_note, urls)
        else:
            result = program_html(page, spec.program_html, urls)
        score *= result.score
        reasons.append(f"{eval_type}: {result.reason}")
    return EvalResult(score, "; ".join(reasons))
