"""Evaluator matching rules (pure: program_html runs against a fake page that evaluates from a dict)."""

from __future__ import annotations

import pytest

from envs.evaluators import (
    EvalResult,
    clean_answer,
    contains,
    evaluate,
    is_not_achievable_answer,
    normalize,
    program_html,
    string_match,
    url_match,
)
from envs.taskspec import Contents, HtmlCheck, Task

URLS = {"__SHOPPING__": "http://127.0.0.1:5001", "__FORUM__": "http://127.0.0.1:5003/"}


def test_cleaning_strips_quotes_case_and_whitespace() -> None:
    assert clean_answer('  "Order  #100234"\n') == "order #100234"
    assert clean_answer("'x'") == "x" and clean_answer("it's") == "it's"


@pytest.mark.parametrize("text", ["$25,000", "25000", "25000.00", "25,000.0", "$ 25000"])
def test_numbers_normalize_to_one_form(text: str) -> None:
    assert normalize(text) == "25000"


def test_number_normalization_keeps_ids_dates_and_decimals() -> None:
    assert normalize("Order 007 on 2024-03-05 costs $0.50") == "order 007 on 2024-03-05 costs 0.5"
    assert normalize("$0.00") == "0" and normalize("1,2,3") == "1,2,3" and normalize("v1.20") == "v1.20"


@pytest.mark.parametrize(
    ("ref", "text", "expected"),
    [
        ("0", "100", False),
        ("0", "0.5 stars", False),
        ("5", "0.5 stars", False),
        ("25000", "25000.5", False),
        ("0", "$0.00", True),
        ("100234", "Order #100234.", True),
        ("mug", "ceramic mugs", False),
        ("mug", "a Ceramic Mug, blue", True),
        ("$25,000", "the price is 25000.00 now", True),
        ("ceramic mug", "Blue Ceramic  Mug (set)", True),
        ("red mug", "tired mug", False),
        ("n/a", "answer: N/A", True),
    ],
)
def test_contains_matches_whole_tokens_only(ref: str, text: str, expected: bool) -> None:
    assert contains(ref, text) is expected


def test_not_achievable_answers() -> None:
    assert is_not_achievable_answer("N/A") and is_not_achievable_answer("'n/a: no such order'")
    assert not is_not_achievable_answer("n/about") and not is_not_achievable_answer("100234")


def test_string_match_must_include_with_or_and_reason() -> None:
    ref = Contents(must_include=["100234"])
    assert string_match("Order 100234", ref) == EvalResult(1.0, "answer matches")
    bad = string_match("order 100243", ref)
    assert bad.score == 0.0 and bad.reason == "must_include '100234' not found in answer 'order 100243'"
    alt = Contents(must_include=["25000 |OR| twenty-five thousand", "white"])
    assert string_match("White car, $25,000", alt).passed
    assert not string_match("white car, $24,000", alt).passed
    assert string_match(None, ref).reason.startswith("no answer")


def test_string_match_exact_and_exclude() -> None:
    assert string_match(' "$1,299.00" ', Contents(exact_match="1299")).passed
    assert not string_match("1299 dollars", Contents(exact_match="1299")).passed
    result = string_match("30000 or 25000", Contents(must_include=["25000"], must_exclude=["30,000 |OR| 31000"]))
    assert result.score == 0.0 and "must_exclude '30,000' found" in result.reason


def test_not_achievable_reference() -> None:
    for ref in (Contents(exact_match="N/A"), Contents(must_include=["N/A"])):
        assert string_match("N/A", ref).passed
        assert string_match("N/A - the store has no such product", ref).passed
        assert not string_match("100234", ref).passed
    assert not string_match("N/A", Contents(must_include=["100234"])).passed


@pytest.mark.parametrize(
    ("url", "ref", "note", "expected"),
    [
        ("http://127.0.0.1:5001/search?q=mug&page=2", "__SHOPPING__/search?q=mug", "GOLD in PRED", True),
        ("http://127.0.0.1:5001/search?page=2&q=mug", "__SHOPPING__/search?q=mug", "EXACT", False),
        ("http://127.0.0.1:5001/search?page=2&q=mug", "__SHOPPING__/search?q=mug&page=2", "EXACT", True),
        ("http://127.0.0.1:5001/search/?q=ceramic+mug#top", "__SHOPPING__/search?q=ceramic%20mug", "EXACT", True),
        ("http://127.0.0.1:5001/search?q=cup", "__SHOPPING__/search?q=mug", "GOLD in PRED", False),
        ("http://127.0.0.1:5001/orders/100234", "__SHOPPING__/orders/1 |OR| __SHOPPING__/orders/100234", "EXACT",
         True),
        ("http://127.0.0.1:5001/orders/100234/items", "__SHOPPING__/orders/100234", "GOLD in PRED", False),
        ("http://127.0.0.1:5003/f/books", "__FORUM__/f/books", "EXACT", True),
    ],
)
def test_url_match(url: str, ref: str, note: str, expected: bool) -> None:
    result = url_match(url, ref, note, URLS)
    assert result.passed is expected, result.reason


class FakePage:
    """Stands in for a Playwright page: `evaluate` looks the expression up per URL; unknown ones raise."""

    def __init__(self, url: str, pages: dict[str, dict[str, str]]):
        self.url, self.pages, self.visited = url, pages, []

    def goto(self, url: str, wait_until: str = "load") -> None:
        self.url = url
        self.visited.append(url)

    def evaluate(self, expression: str) -> str:
        try:
            return self.pages[self.url][expression]
        except KeyError:
            raise RuntimeError("TypeError: Cannot read properties of null (reading 'outerText')") from None


PRICE = "document.querySelector('.price').outerText"


def test_program_html_reads_last_page_first_then_navigates() -> None:
    page = FakePage("http://127.0.0.1:5001/item/7", {
        "http://127.0.0.1:5001/item/7": {PRICE: "$25,000.00", "document.body.innerText": "White car\n$25,000.00"},
        "http://127.0.0.1:5001/item/8": {PRICE: "$30,000.00"},
    })
    checks = [
        HtmlCheck(url="__SHOPPING__/item/8", locator=PRICE, required_contents=Contents(must_include=["30000"])),
        HtmlCheck(url="last", locator="", required_contents=Contents(must_include=["white car"])),
        HtmlCheck(url="last", locator=PRICE, required_contents=Contents(must_include=["25000.00"])),
    ]
    result = program_html(page, checks, URLS)
    assert result.passed, result.reason
    assert page.visited == ["http://127.0.0.1:5001/item/8"]


def test_program_html_missing_element_fails_with_locator_error() -> None:
    page = FakePage("http://127.0.0.1:5001/item/7", {"http://127.0.0.1:5001/item/7": {}})
    check = HtmlCheck(url="last", locator=PRICE, required_contents=Contents(must_include=["25000"]))
    result = program_html(page, [check], URLS)
    assert result.score == 0.0 and "locator error: TypeError" in result.reason
    excluded = HtmlCheck(url="last", locator=PRICE, required_contents=Contents(must_exclude=["25000"]))
    assert program_html(page, [excluded], URLS).passed  # an absent element holds no excluded text (VWA reads "")
    assert program_html(None, [check], URLS).reason == "program_html needs the browser page"


def make_task(**eval_block: object) -> Task:
    return Task.model_validate({
        "task_id": 5, "sites": ["shopping"], "intent": "x", "start_url": "__SHOPPING__/",
        "eval": eval_block, "reference_solution": ["stop [x]"],
    })


def test_evaluate_multiplies_scores_and_joins_reasons() -> None:
    task = make_task(eval_types=["string_match", "url_match"], reference_answers={"must_include": ["100234"]},
                     reference_url="__SHOPPING__/orders/100234", url_note="EXACT")
    page = FakePage("http://127.0.0.1:5001/orders/100234", {})
    assert evaluate(task, "100234", page, URLS).passed
    wrong_url = evaluate(task, "100234", FakePage("http://127.0.0.1:5001/orders", {}), URLS)
    assert wrong_url.score == 0.0
    assert wrong_url.reason.startswith("string_match: answer matches; url_match: url ")
    assert evaluate(task, "confkv-negative-probe", page, URLS).score == 0.0


def test_url_match_uses_the_final_url_even_after_program_html_navigates() -> None:
    task = make_task(eval_types=["program_html", "url_match"], reference_url="__SHOPPING__/cart", url_note="EXACT",
                     program_html=[{"url": "__SHOPPING__/item/8", "locator": PRICE,
                                    "required_contents": {"must_include": ["30000"]}}])
    page = FakePage("http://127.0.0.1:5001/cart", {"http://127.0.0.1:5001/item/8": {PRICE: "$30,000.00"}})
    result = evaluate(task, None, page, URLS)
    assert result.passed, result.reason
    assert page.url == "http://127.0.0.1:5001/item/8"
