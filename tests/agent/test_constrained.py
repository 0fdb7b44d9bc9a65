"""Grammar-constrained decoding and the append-only chat: no browser, tiny tokenizer, random logits."""

from __future__ import annotations

import pytest
import torch

from agent.actions import parse_action
from agent.constrained import ActionGrammar, ConstrainedDecoder, TokenIndex
from agent.prompt import ChatConversation, TemplateDriftError
from confkv.testing import CHATML_TEMPLATE, tiny_chat_tokenizer


@pytest.fixture(scope="module")
def tok():
    return tiny_chat_tokenizer()


@pytest.fixture(scope="module")
def index(tok):
    return TokenIndex(tok, vocab_size=512)


def _decode(tok, index, grammar, seed: int, max_tokens: int = 40, bias: torch.Tensor | None = None) -> str:
    stop = [tok.eos_token_id]
    hook = ConstrainedDecoder(grammar, index, stop, max_tokens)
    gen = torch.Generator().manual_seed(seed)
    generated: list[int] = []
    for _ in range(max_tokens):
        logits = torch.randn(512, generator=gen) * 4 + (bias if bias is not None else 0)
        token = int(torch.argmax(hook(logits, generated)))
        generated.append(token)
        if token in stop:
            break
    return tok.decode([t for t in generated if t not in stop])


def test_random_logits_always_give_a_valid_action_with_ids_from_the_page(tok, index):
    ids = {3, 17, 42, 105}
    grammar = ActionGrammar(ids, n_tabs=2, text_chars=20, answer_chars=20, url_chars=20)
    verbs = set()
    for seed in range(40):
        action = parse_action(_decode(tok, index, grammar, seed))
        verbs.add(action.verb)
        if action.target is not None:
            assert action.target in ids
        if action.verb == "tab_focus":
            assert action.index in (0, 1)
        if action.verb == "type":
            assert len(action.text) <= 20
    assert len(verbs) >= 5  # the grammar does not collapse onto one verb


def test_free_text_is_closed_before_the_token_budget_runs_out(tok, index):
    grammar = ActionGrammar({1}, answer_chars=500)
    stop_id = tok.convert_tokens_to_ids("stop")
    bias = torch.zeros(512)
    bias[stop_id] = 100.0  # the model wants `stop`, then rambles: the answer must still be closed in time
    text = _decode(tok, index, grammar, seed=0, max_tokens=30, bias=bias)
    action = parse_action(text)
    assert action.verb == "stop" and action.answer.startswith("stop")  # closed although the model wanted more


def test_mask_after_a_prefix_allows_only_continuations(tok, index):
    grammar = ActionGrammar({7, 12})
    hook = ConstrainedDecoder(grammar, index, [tok.eos_token_id], 40)
    hook.states = grammar.advance(grammar.start(), "click [1")
    allowed = {index.strings[i] for i in hook.allowed_mask().nonzero().flatten().tolist()}
    assert allowed == {"2"}  # `click [1` can only become `click [12`
    hook.states = grammar.advance(grammar.start(), "click [12]")
    assert hook.allowed_mask().nonzero().flatten().tolist() == [tok.eos_token_id]
    hook.states = grammar.advance(grammar.start(), "type [7] [blue")
    mask = hook.allowed_mask()
    assert mask[tok.convert_tokens_to_ids("b")] and mask[tok.convert_tokens_to_ids("]")]
    assert not mask[tok.convert_tokens_to_ids("[")] and not mask[tok.eos_token_id]


def test_reasoning_flag_puts_one_line_before_the_action(tok, index):
    grammar = ActionGrammar({4}, reasoning_chars=30)
    text = _decode(tok, index, grammar, seed=3, max_tokens=60)
    assert "\nAction: " in text
    parse_action(text)  # the parser finds the action on the last line


def test_chat_appends_only_new_text_and_keeps_the_prefix(tok):
    chat = ChatConversation(tok, "SYSTEM")
    parts = [chat.user_turn("page one")]
    chat.assistant_reply("click [1]")
    parts.append("click [1]")
    parts.append(chat.user_turn("page two"))
    assert parts[2].startswith("<|im_end|>\n<|im_start|>user\npage two")
    assert "page one" not in parts[2] and "SYSTEM" not in parts[2]
    assert "".join(parts) == chat.render(add_generation_prompt=True)
    with pytest.raises(ValueError, match="two user turns"):
        chat.user_turn("again")


def test_a_template_that_rewrites_old_turns_is_refused():
    drifting = CHATML_TEMPLATE.replace("{{ m['content'] }}", "{{ m['content'] if loop.last else '...' }}")
    chat = ChatConversation(tiny_chat_tokenizer(drifting), "SYSTEM")
    chat.user_turn("page one")
    chat.assistant_reply("click [1]")
    with pytest.raises(TemplateDriftError, match="changed text that is already in the cache"):
        chat.user_turn("page two")


def test_the_next_reply_cannot_retype_the_field_just_filled_or_repeat_a_failure(tok, index):
    from agent.bans import repeat_ban

    ban = repeat_ban("type [3] [blue mug] [1]", "OK: type [3] [blue mug] [1]")
    assert ban == {"type": {3}}
    assert repeat_ban("click [3]", "FAILED: element [3] is hidden") == {"click": {3}}  # a failure is not repeated
    assert repeat_ban("click [3]", "OK: click [3]") == {} and repeat_ban(None, None) == {}
    assert repeat_ban("I think so", "INVALID reply: no action") == {}
    type_id = tok.convert_tokens_to_ids("type")
    bias = torch.zeros(512)
    bias[type_id] = 100.0  # the model wants to type again
    grammar = ActionGrammar({3, 7}, avoid=ban)
    for seed in range(10):
        action = parse_action(_decode(tok, index, grammar, seed, bias=bias))
        assert action.verb == "type" and action.target == 7  # any other field is still fine
    only = ActionGrammar({3}, avoid=ban, roles={3: "textbox"})  # the banned field is the only one: no `type` now
    for seed in range(10):
        assert parse_action(_decode(tok, index, only, seed, bias=bias)).verb != "type"


def test_type_and_clear_only_target_fields_when_the_page_names_roles(tok, index):
    type_id = tok.convert_tokens_to_ids("type")
    bias = torch.zeros(512)
    bias[type_id] = 100.0
    roles = {3: "searchbox", 34: "link", 35: "StaticText", 40: "textbox"}
    grammar = ActionGrammar(roles, roles=roles)
    targets = {parse_action(_decode(tok, index, grammar, seed, bias=bias)).target for seed in range(12)}
    assert targets <= {3, 40} and targets  # never the link or the text
    click_id = tok.convert_tokens_to_ids("click")
    bias = torch.zeros(512)
    bias[click_id] = 100.0  # click reaches the link, text and fields, not a landmark
    roles[50] = "navigation"
    grammar = ActionGrammar(roles, roles=roles)
    clicked = {parse_action(_decode(tok, index, grammar, seed, bias=bias)).target for seed in range(40)}
    assert 50 not in clicked and clicked >= {34, 35}
    bare = ActionGrammar({50: "navigation"}, roles={50: "navigation"})  # only a landmark: click keeps it
    assert parse_action(_decode(tok, index, bare, 0, bias=bias)).target == 50
    no_fields = ActionGrammar({34: "link"}, roles={34: "link"})  # no field on the page: type stays expressible
    bias = torch.zeros(512)
    bias[type_id] = 100.0
    assert parse_action(_decode(tok, index, no_fields, 0, bias=bias)).target == 34


def test_goto_takes_a_url_not_an_element_id(tok, index):
    grammar = ActionGrammar({1, 15})
    states = grammar.advance(grammar.start(), "goto [")
    assert not grammar.advance(states, "1]")  # `goto [1]` (an id) is not a URL
    for url in ("http://127.0.0.1:8001/orders", "https://a.example/x", "/orders?page=2"):
        assert grammar.accepts(grammar.advance(states, url + "]")), url


def test_after_a_submitted_search_the_next_reply_does_not_type_again(tok, index):
    from agent.bans import repeat_ban

    ban = repeat_ban("type [3] [blue mug] [1]", "OK: type [3] [blue mug] [1]", {3: 30, 30: 31, 31: 32})
    assert ban == {"type": {3, 30, 31}}  # every field of the new page, for this one turn
    no_enter = repeat_ban("type [3] [blue mug] [0]", "OK: type [3] [blue mug] [0]", {3: 30, 7: 31})
    assert no_enter == {"type": {3}}  # no Enter: other fields of the form stay open
    assert repeat_ban("type [3] [blue mug] [1]", "FAILED: no element [3]", {3: 30}) == {"type": {3}}
    assert repeat_ban("click [3]", "OK: click [3]", {3: 30}) == {} and repeat_ban(None, None, {}) == {}
    type_id = tok.convert_tokens_to_ids("type")
    bias = torch.zeros(512)
    bias[type_id] = 100.0
    roles = {3: "searchbox", 30: "textbox", 34: "link"}
    grammar = ActionGrammar(roles, roles=roles, avoid=ban)
    for seed in range(10):
        assert parse_action(_decode(tok, index, grammar, seed, bias=bias)).verb != "type"


def test_an_element_already_acted_on_from_this_page_is_banned_there_for_that_verb():
    from agent.bans import page_bans
    from agent.model_policy import ModelAgent
    from agent.observation import Observation
    from confkv.testing import tiny_model

    def page(url, nodes):
        return Observation(text="", url=url, title="t", tabs=["t"], active_tab=0, ids={i: i for i in nodes},
                           nodes=nodes)  # fmt: skip

    tried = {("http://x/a", "click", ("link", "Mug"))}
    assert page_bans(tried, page("http://x/a", {3: ("link", "Mug"), 7: ("link", "Lamp")})) == {"click": {3}}
    # matched by role and name, not id: a page whose content changed renumbers its elements
    assert page_bans(tried, page("http://x/a", {5: ("link", "Mug"), 3: ("link", "Lamp")})) == {"click": {5}}
    assert page_bans(tried, page("http://x/b", {3: ("link", "Mug")})) == {}  # from another page it may be progress
    # the agent records what it did and bans it on the next visit to that page (a two-step cycle is caught too)
    model, _ = tiny_model("qwen2", max_position_embeddings=4096)
    agent = ModelAgent(model, tiny_chat_tokenizer(), "full", max_action_tokens=16, model_name="tiny")
    agent.begin("task")
    home = page("http://x/a", {3: ("link", "Mug"), 4: ("searchbox", "Search")})
    agent._remember("click [3]", home)
    agent._remember("type [4] [mug] [1]", home)
    agent._remember("stop [x]", home)  # no element: nothing to ban
    assert agent.tried == {("http://x/a", "click", ("link", "Mug")), ("http://x/a", "type", ("searchbox", "Search"))}
    hook = agent._hook(home, "OK: go_back")
    assert hook is not None and hook.grammar.avoid == {"click": {"3"}, "type": {"4"}}
    agent.begin("next task")
    assert agent.tried == set()  # per episode


def test_with_labels_targets_are_the_page_labels_and_bans_still_apply(tok, index):
    labels = {3: "searchbox 'Find'", 9: "link 'Cart'", 10: "StaticText '(3 items)'", 50: "navigation 'Menu'"}
    roles = {3: "searchbox", 9: "link", 10: "StaticText", 50: "navigation"}
    grammar = ActionGrammar(labels, roles=roles, labels=labels, avoid={"click": {10}}, text_chars=10)
    states = grammar.advance(grammar.start(), "click [")
    assert not grammar.advance(states, "9]")  # no ids: a label
    assert grammar.accepts(grammar.advance(states, "link 'Cart']"))
    assert not grammar.advance(states, "StaticText '(3 items)']") and not grammar.advance(states, "navigation")
    click_id = tok.convert_tokens_to_ids("click")
    bias = torch.zeros(512)
    bias[click_id] = 100.0
    names = {parse_action(_decode(tok, index, grammar, seed, max_tokens=60, bias=bias)).target.name for seed in range(8)}
    assert names and names <= {"Cart", "Find"}  # the banned text and the landmark never come out


def test_the_agent_writes_labels_the_executor_gets_ids_and_the_next_turn_reads_labels():
    from agent.model_policy import ModelAgent
    from agent.observation import Observation
    from confkv.testing import tiny_model

    model, _ = tiny_model("qwen2", max_position_embeddings=8192)
    agent = ModelAgent(model, tiny_chat_tokenizer(), "full", max_action_tokens=16, model_name="tiny")
    assert "click [link 'Velvet Fern']" in agent_prompt(agent)  # the demonstration names elements the same way
    nodes = {3: ("searchbox", "Find"), 9: ("link", "Cart"), 10: ("StaticText", "(3 items)")}
    page = Observation(text="\n".join(f"[{i}] {r} '{n}'" for i, (r, n) in nodes.items()), url="http://x/",
                       title="t", tabs=["t"], active_tab=0, ids={i: i for i in nodes}, nodes=nodes)  # fmt: skip
    for intent in ("open the cart", "find it", "go to the cart", "open the cart page", "search"):
        # a random model: the first of these intents whose reply takes a target (not scroll, stop ...) is the check
        agent.begin(intent)
        action, info = agent.act(page, None)
        written, executed = parse_action(info.raw_output), parse_action(action)
        if written.target is not None:
            break
        agent.close()
    labels = page.labels()
    assert written.target is not None and not isinstance(written.target, int)  # the model wrote a label (seeded)
    assert isinstance(executed.target, int) and labels[executed.target] in info.raw_output  # the executor gets its id
    assert agent.chat.messages[-1]["content"] == info.raw_output  # the cache holds what the model wrote
    agent.open_turn(page, "OK: " + executed.to_text())
    assert f"OK: {info.raw_output}" in agent.chat.messages[-1]["content"]  # its own action, as it wrote it


def agent_prompt(agent) -> str:
    agent.begin("x")
    return agent.chat.render(add_generation_prompt=False)


def test_after_a_failed_goto_and_two_submits_into_a_field_the_episode_drops_them():
    from agent.bans import MAX_SUBMITS_PER_FIELD, episode_bans
    from agent.model_policy import ModelAgent
    from agent.observation import Observation
    from confkv.testing import tiny_model

    def page(url, nodes):
        return Observation(text="", url=url, title="t", tabs=["t"], active_tab=0, ids={i: i for i in nodes},
                           nodes=nodes)  # fmt: skip

    home = page("http://x/", {3: ("searchbox", "Search"), 4: ("link", "Books"), 5: ("textbox", "Name")})
    assert episode_bans({}, False, home) == ({}, set())
    assert episode_bans({("searchbox", "Search"): MAX_SUBMITS_PER_FIELD}, True, home) == ({"type": {3}}, {"goto"})
    grammar = ActionGrammar({3, 4, 5}, drop={"goto"})
    assert not grammar.advance(grammar.start(), "goto [") and grammar.advance(grammar.start(), "click [")

    model, _ = tiny_model("qwen2", max_position_embeddings=4096)
    agent = ModelAgent(model, tiny_chat_tokenizer(), "full", max_action_tokens=16, model_name="tiny")
    agent.begin("task")
    for n, url in enumerate(("http://x/", "http://x/c/1", "http://x/c/2")):  # another page each time: no page ban
        here = page(url, home.nodes)
        agent.open_turn(here, "OK: click [4]")
        hook = agent._hook(here, "OK: click [4]")
        assert hook is not None and ("3" in hook.grammar.avoid.get("type", set())) == (n >= MAX_SUBMITS_PER_FIELD)
        agent._remember("type [3] [mug] [1]", here)
        agent._remember("type [5] [Ann] [0]", here)  # not submitted: never counted
        agent.close_turn("type [3] [mug] [1]")
    assert agent.submits == {("searchbox", "Search"): 3}
    assert "goto" not in agent._hook(home, "OK: click [4]").grammar.drop
    agent.open_turn(home, "FAILED: goto http://x/order/1: the site answered HTTP 404 NOT FOUND")
    assert agent._hook(page("http://x/y", {}), None).grammar.drop == {"goto"}  # for the rest of the episode
    agent.begin("next task")
    assert agent.submits == {} and not agent.goto_failed
