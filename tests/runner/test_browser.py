"""Real headless Chromium against local fixture pages: observation, executor, tabs, confinement, shutdown."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from agent.actions import parse_action
from agent.observation import Observation
from runner import procs
from runner.browser import BrowserCrashed, BrowserSession, OriginPolicy
from runner.executor import ExecResult, execute
from runner.observe import observe

pytestmark = pytest.mark.browser


def run(session: BrowserSession, text: str, obs: Observation | None = None) -> ExecResult:
    return execute(session, parse_action(text), obs if obs is not None else observe(session))


def find(obs: Observation, role: str, name: str) -> int:
    matches = [i for i, (r, n) in obs.nodes.items() if r == role and n == name]
    assert matches, f"no {role} '{name}' in\n{obs.render()}"
    return matches[0]


def open_page(session: BrowserSession, url: str) -> Observation:
    result = run(session, f"goto [{url}]")
    assert result.ok, result.error
    return observe(session)


def test_origin_policy_is_exact_and_file_is_opt_in() -> None:
    policy = OriginPolicy(["http://127.0.0.1:8001/shop"])
    assert policy.allows("http://127.0.0.1:8001/anything?x=1")
    assert not policy.allows("http://127.0.0.1:8002/")
    assert not policy.allows("http://localhost:8001/")
    assert not policy.allows("https://127.0.0.1:8001/")
    assert policy.allows("data:text/html,hi") and policy.allows("about:blank")
    assert not policy.allows("file:///etc/passwd")
    assert OriginPolicy([], allow_file=True).allows("file:///tmp/miniwob/click.html")
    with pytest.raises(ValueError, match="not an absolute"):
        OriginPolicy(["127.0.0.1"])


def test_observe_form_page(session: BrowserSession, site) -> None:
    obs = open_page(session, f"{site.url}/form.html")
    print(f"\nform page observation: {obs.chars} chars, {len(obs.nodes)} nodes\n{obs.render()}")
    assert obs.url == f"{site.url}/form.html" and obs.title == "Search form"
    assert obs.tabs == ["Search form"] and obs.active_tab == 0
    lines = obs.text.splitlines()
    assert f"  [{find(obs, 'textbox', 'Query')}] textbox 'Query' value='old text' required" in lines
    assert f"  [{find(obs, 'checkbox', 'Subscribe')}] checkbox 'Subscribe' checked" in lines
    assert f"  [{find(obs, 'combobox', 'Color')}] combobox 'Color' value='Red' collapsed" in lines
    assert "InlineTextBox" not in obs.text and "generic" not in obs.text
    assert "StaticText 'Query'" not in obs.text  # the label only repeats the field's name
    assert sorted(obs.nodes) == list(range(1, len(obs.nodes) + 1))
    assert all(isinstance(v, int) for v in obs.ids.values())
    assert obs.chars < 800
    assert observe(session).text == obs.text  # ids stable for an unchanged page


def test_click_link_by_id_and_by_role_name(session: BrowserSession, site) -> None:
    obs = open_page(session, f"{site.url}/index.html")
    assert "[1] heading 'Fixture Shop'" in obs.text
    assert run(session, f"click [{find(obs, 'link', 'Form page')}]", obs).ok
    assert session.active_page.url == f"{site.url}/form.html"
    assert run(session, "click [link 'Home']").ok
    assert session.active_page.url == f"{site.url}/index.html"
    missing = run(session, "click [link 'No such link']")
    assert not missing.ok and "no link named 'No such link'" in missing.error


def test_type_replaces_text_and_enter_submits(session: BrowserSession, site) -> None:
    obs = open_page(session, f"{site.url}/form.html")
    result = run(session, f"type [{find(obs, 'textbox', 'Query')}] [blue shoes]", obs)
    assert result.ok, result.error
    assert session.active_page.url.startswith(f"{site.url}/result.html?q=blue+shoes&")
    assert "heading 'You searched: blue shoes'" in observe(session).text


def test_type_without_enter_selects_options_and_refuses_buttons(session: BrowserSession, site) -> None:
    obs = open_page(session, f"{site.url}/form.html")
    assert run(session, f"type [{find(obs, 'combobox', 'Color')}] [green] [0]", obs).ok
    assert run(session, f"type [{find(obs, 'textbox', 'Note')}] [fragile] [0]", obs).ok
    after = observe(session)
    assert "combobox 'Color' value='Green'" in after.text and "textbox 'Note' value='fragile'" in after.text
    assert session.active_page.url == f"{site.url}/form.html"
    bad = run(session, f"type [{find(after, 'button', 'Send')}] [x]", after)
    assert not bad.ok and "not a text field" in bad.error
    wrong = run(session, f"type [{find(after, 'combobox', 'Color')}] [Purple]", after)
    assert not wrong.ok and "no option 'Purple'" in wrong.error and "Green" in wrong.error
    query = find(after, "textbox", "Query")
    assert run(session, f"clear [{query}]", after).ok
    assert f"[{query}] textbox 'Query' required" in observe(session).text  # no value left
    assert run(session, "click [button 'Send']").ok  # the required field is empty: the browser refuses to submit
    assert session.active_page.url == f"{site.url}/form.html"
    assert run(session, "type [textbox 'Query'] [socks] [0]").ok
    assert run(session, "click [button 'Send']").ok
    assert "q=socks" in session.active_page.url and "color=Green" in session.active_page.url


def test_scroll_and_history(session: BrowserSession, site) -> None:
    open_page(session, f"{site.url}/index.html")
    open_page(session, f"{site.url}/long.html")
    scroll_y = "() => window.scrollY"
    assert run(session, "scroll [down]").ok
    assert session.active_page.evaluate(scroll_y) > 300
    assert run(session, "scroll [up]").ok
    assert session.active_page.evaluate(scroll_y) == 0
    assert run(session, "go_back").ok and session.active_page.url == f"{site.url}/index.html"
    assert run(session, "go_forward").ok and session.active_page.url == f"{site.url}/long.html"
    assert run(session, "press [ctrl+End]").ok
    assert session.active_page.evaluate(scroll_y) > 3000


def test_tabs_popup_focus_and_close(session: BrowserSession, site) -> None:
    obs = open_page(session, f"{site.url}/index.html")
    assert run(session, f"click [{find(obs, 'link', 'Open second page')}]", obs).ok
    popup = observe(session)
    assert popup.tabs == ["Fixture Home", "Second page"] and popup.active_tab == 1
    assert "heading 'Second page heading'" in popup.text
    assert run(session, "tab_focus [0]").ok and observe(session).url == f"{site.url}/index.html"
    bad = run(session, "tab_focus [7]")
    assert not bad.ok and "out of range" in bad.error
    assert run(session, "new_tab").ok
    blank = observe(session)
    assert len(blank.tabs) == 3 and blank.active_tab == 2 and blank.url == "about:blank"
    no_history = run(session, "go_back", blank)
    assert not no_history.ok and "no previous page" in no_history.error
    assert run(session, "close_tab").ok and run(session, "tab_focus [1]").ok and run(session, "close_tab").ok
    final = observe(session)
    assert final.tabs == ["Fixture Home"] and final.active_tab == 0


def test_foreign_origin_is_blocked_and_logged(session: BrowserSession, site, foreign_site) -> None:
    open_page(session, f"{site.url}/index.html")
    page = session.active_page
    foreign = f"{foreign_site.url}/page2.html"
    page.evaluate("u => fetch(u).catch(() => null)", f"{foreign}?via=fetch")
    page.evaluate("u => { const i = new Image(); i.src = u; document.body.appendChild(i); }", f"{foreign}?via=img")
    page.evaluate("u => window.open(u)", f"{foreign}?via=popup")
    page.wait_for_timeout(300)
    refused = run(session, f"goto [{foreign}?via=goto]")
    assert not refused.ok and "not one of the task's sites" in refused.error
    for via in ("fetch", "img", "popup", "goto"):
        assert f"{foreign}?via={via}" in session.blocked
    assert foreign_site.requests == []  # nothing ever reached the other server
    assert observe(session).tabs == ["Fixture Home"]  # the foreign popup was closed
    assert session.active_page.url == f"{site.url}/index.html"


def test_goto_a_missing_page_is_a_failure_the_agent_sees(session: BrowserSession, site) -> None:
    missing = run(session, f"goto [{site.url}/no-such-page.html]")
    assert not missing.ok and "HTTP 404" in missing.error  # a 404 page must not read as "OK"
    assert run(session, f"goto [{site.url}/index.html]").ok


def test_unknown_and_stale_ids_are_errors_not_crashes(session: BrowserSession, site) -> None:
    obs = open_page(session, f"{site.url}/index.html")
    unknown = run(session, "click [999]", obs)
    assert not unknown.ok and "no element [999]" in unknown.error
    assert run(session, "click [link 'Form page']").ok
    stale = run(session, f"click [{find(obs, 'link', 'Long page')}]", obs)  # id from the previous page
    assert not stale.ok and "no longer on the page" in stale.error
    assert session.active_page.url == f"{site.url}/form.html"


def test_stop_returns_the_answer(session: BrowserSession) -> None:
    assert run(session, "stop [$25.00]") == ExecResult(ok=True, done=True, answer="$25.00")


@pytest.mark.parametrize("raised", [None, RuntimeError, KeyboardInterrupt])
def test_no_chromium_survives_the_session(site, tmp_path, raised) -> None:
    pids: set[int] = set()
    with pytest.raises(raised) if raised else _nullcontext():
        with BrowserSession([site.url], screenshots_dir=tmp_path) as s:
            open_page(s, f"{site.url}/index.html")
            pids = s.chromium_pids()
            assert s.screenshot("step-0") == tmp_path / "step-0.png"
            if raised:
                raise raised("boom")
    assert len(pids) >= 2  # browser + renderer at least
    assert (tmp_path / "step-0.png").stat().st_size > 1000
    assert [p for p in pids if procs.is_alive(p)] == []


@pytest.fixture
def ctrl_c_enabled():
    """A runner started in the background (nohup, CI) inherits SIGINT as ignored: restore Python's Ctrl-C handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_a_browser_call_leaves_no_chromium(site, ctrl_c_enabled) -> None:
    pids: set[int] = set()
    with pytest.raises(KeyboardInterrupt):
        with BrowserSession([site.url]) as s:
            pids = s.chromium_pids()
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
            s.active_page.wait_for_timeout(10_000)  # interrupted half a second in
    assert pids and [p for p in pids if procs.is_alive(p)] == []


def test_renderer_crash_raises_browser_crashed(site) -> None:
    with BrowserSession([site.url], timeout_ms=3000) as s:
        open_page(s, f"{site.url}/index.html")
        pids = s.chromium_pids()
        with pytest.raises(Exception):  # noqa: B017 - Playwright reports the aborted navigation; the crash follows
            s.active_page.goto("chrome://crash")
        with pytest.raises(BrowserCrashed, match="crashed"):
            observe(s)
        with pytest.raises(BrowserCrashed):
            run(s, "scroll [down]", None)
    assert [p for p in pids if procs.is_alive(p)] == []


def test_killed_browser_raises_browser_crashed(site) -> None:
    with BrowserSession([site.url], timeout_ms=3000) as s:
        obs = open_page(s, f"{site.url}/index.html")
        pids = s.chromium_pids()
        for root in s._root_pids:
            os.kill(root, signal.SIGKILL)
        with pytest.raises(BrowserCrashed, match="disconnected"):
            execute(s, parse_action("click [link 'Form page']"), obs)
    assert [p for p in pids if procs.is_alive(p)] == []


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_click_by_id_lands_on_a_link_that_wraps(session: BrowserSession, site) -> None:
    # the centre of a wrapped link's bounding box lies between its line fragments: clicking there hit the table cell
    # and did nothing (a reference trajectory broke on a long listing title); the first fragment's centre is on it
    obs = open_page(session, f"{site.url}/wrapped.html")
    link = find(obs, "link", "A listing title long enough to wrap onto a second line x")
    assert run(session, f"click [{link}]", obs).ok
    assert session.active_page.url == f"{site.url}/form.html"
