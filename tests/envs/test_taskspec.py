"""Task schema: valid files load; every kind of mistake gives a located, readable error; WebArena JSON imports."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from agent.actions import parse_action
from envs.evaluators import evaluate
from envs.taskspec import TaskSpecError, load_task, load_tasks
from envs.webarena_import import from_webarena, load_webarena_json

GOOD = """\
task_id: 12
sites: [shopping]
intent: "What is the order number of my most recent order that contains a ceramic mug?"
start_url: "__SHOPPING__/"
require_login: true
require_reset: false
difficulty: easy
memory_span: long
eval:
  eval_types: [string_match]
  reference_answers:
    must_include: ["100234"]
  reference_url: null
  url_note: "GOLD in PRED"
reference_solution:
  - "click [link 'My Orders']"
  - "click [link 'Order #100234']"
  - "stop [100234]"
"""


def write(tmp_path: Path, text: str, name: str = "shopping_003.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def errors_of(path: Path) -> list[str]:
    with pytest.raises(TaskSpecError) as info:
        load_task(path, parse_step=parse_action)  # the runner's grammar: envs itself does not know it
    return info.value.errors


def test_good_task_loads_with_defaults_and_expands_tabs(tmp_path: Path) -> None:
    task = load_task(write(tmp_path, GOOD))
    assert task.task_id == 12 and task.sites == ["shopping"] and task.memory_span == "long"
    assert task.eval.reference_answers is not None and task.eval.reference_answers.must_include == ["100234"]
    assert task.source.endswith("shopping_003.yaml")
    two_tabs = write(tmp_path, GOOD.replace('task_id: 12', 'task_id: 301').replace(
        "sites: [shopping]", "sites: [shopping, forum]").replace(
        '"__SHOPPING__/"', '"__SHOPPING__/cart |AND| __FORUM__/f/mugs"'), "cross_001.yaml")
    urls = {"__SHOPPING__": "http://127.0.0.1:5001/", "__FORUM__": "http://127.0.0.1:5003"}
    assert load_task(two_tabs).start_urls(urls) == ["http://127.0.0.1:5001/cart", "http://127.0.0.1:5003/f/mugs"]


def test_wrong_type_is_located_by_file_key_path_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace('must_include: ["100234"]', 'must_include: "100234"'))
    assert errors_of(path) == [f"{path}: eval.reference_answers.must_include: expected a list, got str (line 12)"]


def test_unquoted_number_answer_suggests_quoting(tmp_path: Path) -> None:
    (msg,) = errors_of(write(tmp_path, GOOD.replace('["100234"]', "[100234]")))
    assert "eval.reference_answers.must_include[0]: expected a string, got int (quote it: '100234')" in msg


def test_malformed_yaml_reports_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("  - \"stop [100234]\"", "  - \"stop [100234]\n  bad: [unclosed"))
    (msg,) = errors_of(path)
    assert msg.startswith(f"{path}:") and "malformed YAML" in msg
    line = int(msg.split(":")[1])
    assert 18 <= line <= 20


def test_unknown_key_and_bad_literal_are_all_reported(tmp_path: Path) -> None:
    text = GOOD.replace("difficulty: easy", "difficulty: trivial\nanswer_hint: mugs")
    msgs = errors_of(write(tmp_path, text))
    assert any("answer_hint: unknown key" in m and "(line 8)" in m for m in msgs)
    assert any("difficulty: expected 'easy', 'medium' or 'hard', got 'trivial'" in m for m in msgs)


def test_quoted_bool_is_rejected_in_strict_mode(tmp_path: Path) -> None:
    (msg,) = errors_of(write(tmp_path, GOOD.replace("require_login: true", 'require_login: "yes"')))
    assert "require_login: expected true or false, got str" in msg


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("eval_types: [string_match]", "eval_types: [string_match, url_match]",
         "eval_types has 'url_match' but reference_url is missing or empty"),
        ("reference_url: null", 'reference_url: "__SHOPPING__/orders"',
         "reference_url is given but 'url_match' is not in eval_types"),
        ('must_include: ["100234"]', "must_include: []", "needs at least one of exact_match"),
        ("eval_types: [string_match]", "eval_types: [string_match, page_image_query]",
         "eval.eval_types[1]: expected 'string_match', 'url_match' or 'program_html'"),
    ],
)
def test_eval_block_must_match_eval_types(tmp_path: Path, old: str, new: str, expected: str) -> None:
    msgs = errors_of(write(tmp_path, GOOD.replace(old, new)))
    assert any(expected in m for m in msgs), msgs


def test_program_html_items_need_all_keys(tmp_path: Path) -> None:
    text = GOOD.replace("eval_types: [string_match]", "eval_types: [string_match, program_html]").replace(
        '  url_note: "GOLD in PRED"\n',
        '  url_note: "GOLD in PRED"\n  program_html:\n    - url: last\n      required_contents: {must_include: [x]}\n')
    (msg,) = errors_of(write(tmp_path, text))
    assert "eval.program_html[0].locator: required key is missing" in msg


def test_placeholders_must_name_known_sites_of_the_task(tmp_path: Path) -> None:
    msgs = errors_of(write(tmp_path, GOOD.replace('"__SHOPPING__/"', '"__REDDIT__/ |AND| __FORUM__/"')))
    assert any("unknown placeholder __REDDIT__" in m for m in msgs)
    assert any("placeholder __FORUM__ names site 'forum', not in sites ['shopping']" in m for m in msgs)
    goto = GOOD.replace("  - \"click [link 'My Orders']\"", "  - \"goto [__CLASSIFIEDS__/]\"")
    (msg,) = errors_of(write(tmp_path, goto))
    assert "reference_solution[0]: placeholder __CLASSIFIEDS__" in msg and "(line 16)" in msg


def test_task_id_range_follows_sites(tmp_path: Path) -> None:
    (msg,) = errors_of(write(tmp_path, GOOD.replace("task_id: 12", "task_id: 150")))
    assert "task_id: 150 is outside the shopping range 1-99" in msg


def test_reference_solution_rules(tmp_path: Path) -> None:
    no_stop = GOOD.replace('  - "stop [100234]"\n', "")
    assert any("must end with 'stop [answer]'" in m for m in errors_of(write(tmp_path, no_stop)))
    early = GOOD.replace("  - \"click [link 'My Orders']\"", '  - "stop [1]"')
    assert any("reference_solution[0]: stop must be the last action" in m for m in errors_of(write(tmp_path, early)))


def test_reference_solution_must_parse_in_agent_grammar(tmp_path: Path) -> None:
    bad = GOOD.replace("  - \"click [link 'My Orders']\"", '  - "clickk [link \'My Orders\']"')
    msgs = errors_of(write(tmp_path, bad))
    assert any(m.startswith(f"{tmp_path}/shopping_003.yaml: reference_solution[0]: ") and "clickk" in m
               for m in msgs), msgs


def test_load_tasks_checks_id_uniqueness_and_collects_every_error(tmp_path: Path) -> None:
    write(tmp_path, GOOD, "shopping_001.yaml")
    write(tmp_path, GOOD, "shopping_002.yaml")
    write(tmp_path, GOOD.replace("intent:", "intentt:"), "shopping_003.yaml")
    with pytest.raises(TaskSpecError) as info:
        load_tasks(tmp_path)
    text = str(info.value)
    assert "shopping_002.yaml: task_id: 12 is already used by" in text and "shopping_001.yaml" in text
    assert "shopping_003.yaml: intent: required key is missing" in text
    assert "shopping_003.yaml: intentt: unknown key" in text
    (tmp_path / "shopping_002.yaml").unlink()
    (tmp_path / "shopping_003.yaml").unlink()
    assert [t.task_id for t in load_tasks(tmp_path)] == [12]
    with pytest.raises(TaskSpecError, match="no such file"):
        load_tasks([tmp_path / "missing.yaml"])


# ------------------------------------------------------------------------------------------------ WebArena import

VWA_CLASSIFIEDS_4 = {
    "sites": ["classifieds"],
    "task_id": 4,
    "require_login": True,
    "storage_state": "./.auth/classifieds_state.json",
    "start_url": "__CLASSIFIEDS__",
    "geolocation": None,
    "intent_template": "Navigate to my listing of {{item}} and change the price to {{price}}.",
    "intent": "Navigate to my listing of the white car and change the price to $25000. "
              "Update the price in the description as well.",
    "image": None,
    "instantiation_dict": {"item": "the white car", "price": "$25000"},
    "require_reset": True,
    "eval": {
        "eval_types": ["program_html"],
        "reference_answers": None,
        "reference_url": "",
        "program_html": [
            {"url": "__CLASSIFIEDS__/index.php?page=item&id=84144", "locator": "document.querySelector('.price').outerText",
             "required_contents": {"must_include": ["25000.00"]}},
            {"url": "__CLASSIFIEDS__/index.php?page=item&id=84144", "locator": "document.querySelector('.desc').outerText",
             "required_contents": {"must_include": ["$25000 |OR| $25,000"], "must_exclude": ["30000", "30,000"]}},
        ],
        "url_note": "GOLD in PRED",
    },
    "reasoning_difficulty": "easy",
    "visual_difficulty": "easy",
    "overall_difficulty": "easy",
    "comments": "",
    "intent_template_id": 2,
    "viewport_size": {"width": 1280},
}


def test_vwa_config_imports_with_extras_kept() -> None:
    task = from_webarena(VWA_CLASSIFIEDS_4)
    assert task.task_id == 4 and task.sites == ["classifieds"] and task.require_reset and task.difficulty == "easy"
    assert task.not_evaluable is None and task.reference_solution == []
    assert task.eval.eval_types == ["program_html"] and len(task.eval.program_html) == 2
    assert task.eval.program_html[1].required_contents.must_exclude == ["30000", "30,000"]
    assert task.extra["viewport_size"] == {"width": 1280} and task.extra["intent_template_id"] == 2


def test_reddit_maps_to_forum_and_fuzzy_match_rules() -> None:
    config = {"sites": ["reddit"], "task_id": 27, "require_login": True, "require_reset": False,
              "start_url": "__REDDIT__/forums", "intent": "Tell me the count of comments on the top post",
              "eval": {"eval_types": ["string_match", "url_match"], "reference_url": "__REDDIT__/f/books |OR| x",
                       "url_note": "GOLD in PRED",
                       "reference_answers": {"fuzzy_match": ["2 comments"], "must_include": [2]}}}
    task = from_webarena(config)
    assert task.sites == ["forum"] and task.start_url == "__FORUM__/forums"
    assert task.eval.reference_url == "__FORUM__/f/books |OR| x"
    assert task.eval.reference_answers is not None and task.eval.reference_answers.must_include == ["2", "2 comments"]
    assert task.extra["fuzzy_match"] == ["2 comments"] and task.not_evaluable is None

    config["eval"]["reference_answers"] = {"fuzzy_match": "N/A"}
    na = from_webarena(config)
    assert na.is_not_achievable and na.eval.reference_answers.exact_match == "N/A"

    config["eval"]["reference_answers"] = {"fuzzy_match": "a polite refusal"}
    judged = from_webarena(config)
    assert judged.not_evaluable and "needs an LLM judge" in judged.not_evaluable
    result = evaluate(judged, "anything", None, {})
    assert result.score == 0.0 and "not evaluable" in result.reason


def test_func_program_html_marks_task_not_evaluable() -> None:
    config = json.loads(json.dumps(VWA_CLASSIFIEDS_4))
    config["eval"]["program_html"][0]["locator"] = "func:get_query_text(__page__, '.q')"
    task = from_webarena(config)
    assert task.not_evaluable and "func:" in task.not_evaluable
    assert len(task.eval.program_html) == 1 and task.extra["program_html_dropped"]


def test_load_webarena_json_locates_bad_entries(tmp_path: Path) -> None:
    gitlab = {**VWA_CLASSIFIEDS_4, "task_id": 9, "sites": ["gitlab"]}
    no_intent = {k: v for k, v in VWA_CLASSIFIEDS_4.items() if k != "intent"} | {"task_id": 10}
    path = tmp_path / "test.raw.json"
    path.write_text(json.dumps([VWA_CLASSIFIEDS_4, gitlab, no_intent]))
    with pytest.raises(TaskSpecError) as info:
        load_webarena_json(path)
    assert info.value.errors[0] == (f"{path}[1] (task_id 9): sites: 'gitlab' has no local counterpart "
                                    "(we serve ['classifieds', 'forum', 'shopping'])")
    assert "[2] (task_id 10): intent: expected a string, got null" in info.value.errors[1]
    path.write_text(json.dumps([VWA_CLASSIFIEDS_4]))
    assert [t.task_id for t in load_webarena_json(path)] == [4]
    path.write_text("[{")
    with pytest.raises(TaskSpecError, match=r"test.raw.json:1: malformed JSON"):
        load_webarena_json(path)


# ------------------------------------------------------------------------------------------- hostile task files

BOMB = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


def test_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    import resource

    text = BOMB + GOOD.replace("difficulty: easy", "difficulty: *h")  # the bomb in a Literal field
    path = write(tmp_path, text)
    assert path.stat().st_size < 1500
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    (msg,) = errors_of(path)
    assert "refused" in msg and "alias bomb" in msg and len(msg) < 300
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: no blow-up


def test_recursive_alias_and_huge_file_are_refused(tmp_path: Path) -> None:
    (msg,) = errors_of(write(tmp_path, GOOD + "extra: &x [*x]\n"))
    assert "refused" in msg
    big = write(tmp_path, GOOD + f"# {'x' * (2 << 20)}\n", "big.yaml")
    (msg,) = errors_of(big)
    assert "at most 1,048,576" in msg and len(msg) < 200


def test_small_aliases_still_work(tmp_path: Path) -> None:
    text = GOOD.replace('must_include: ["100234"]', "must_include: &ans [\"100234\"]") + "extra: {again: *ans}\n"
    assert load_task(write(tmp_path, text)).extra == {"again": ["100234"]}


def test_messages_embed_only_a_prefix_of_a_long_value(tmp_path: Path) -> None:
    huge = "z" * 50_000
    msgs = errors_of(write(tmp_path, GOOD.replace("difficulty: easy", f"difficulty: {huge}")))
    assert any("difficulty: expected 'easy', 'medium' or 'hard', got 'zzz" in m for m in msgs)
    assert all(len(m) < 300 for m in msgs)


@pytest.mark.parametrize("field, old, limit", [
    ("intent", '"What is the order number of my most recent order that contains a ceramic mug?"', "4,000"),
    ("eval.reference_answers.must_include[0]", '"100234"', "1,000"),
])  # fmt: skip
def test_text_fields_are_capped_with_a_clear_message(tmp_path: Path, field: str, old: str, limit: str) -> None:
    msgs = errors_of(write(tmp_path, GOOD.replace(old, '"' + "word " * 20_000 + '"', 1)))
    assert any(f"{field}: text is 100,000 characters; at most {limit} allowed" in m for m in msgs), msgs
    assert all(len(m) < 300 for m in msgs)
