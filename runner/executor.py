"""Carry out one `Action` in the browser and say whether it worked.

Why errors are results, not exceptions: a wrong id or a blocked URL is an ordinary model mistake that the episode
loop counts and shows to the model next turn. Only a dead browser raises (`BrowserCrashed`), because nothing after
it can work.

Id targets: the observation maps each id to a CDP backend DOM node. We scroll it into view and click the centre of
its box with the mouse, as a user would (this fires hover/focus/mousedown handlers); a node without a box (hidden,
zero size) gets a DOM `click()` instead. `role 'name'` targets go through Playwright locators (exact name match).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from agent.actions import VERB_SPECS, VERB_TABLE, Action, RoleTarget

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

    from agent.observation import Observation
    from runner.browser import BrowserSession

_KEY_NAMES = {
    "ctrl": "Control", "control": "Control", "cmd": "Meta", "command": "Meta", "meta": "Meta", "win": "Meta",
    "alt": "Alt", "option": "Alt", "shift": "Shift", "enter": "Enter", "return": "Enter", "esc": "Escape",
    "escape": "Escape", "tab": "Tab", "backspace": "Backspace", "delete": "Delete", "del": "Delete",
    "space": "Space", "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
    "arrowup": "ArrowUp", "arrowdown": "ArrowDown", "arrowleft": "ArrowLeft", "arrowright": "ArrowRight",
    "pageup": "PageUp", "pagedown": "PageDown", "home": "Home", "end": "End",
}  # fmt: skip
# Runs on the element (a text node is replaced by its parent element): what kind of input is it?
_KIND_JS = """function() {
  const e = this.nodeType === 3 ? this.parentElement : this;
  if (e.tagName === 'SELECT') return 'select';
  if (e.isContentEditable || e.tagName === 'TEXTAREA') return 'text';
  if (e.tagName === 'INPUT' && !['checkbox','radio','button','submit','reset','file','image','hidden','range',
      'color'].includes((e.type || '').toLowerCase())) return 'text';
  return 'other';
}"""
_SELECT_JS = """function(text) {
  const want = text.trim().toLowerCase();
  const opts = Array.from(this.options);
  const o = opts.find(o => o.label.trim().toLowerCase() === want || o.value.toLowerCase() === want);
  if (!o) return opts.map(o => o.label.trim());
  this.value = o.value;
  this.dispatchEvent(new Event('input', {bubbles: true}));
  this.dispatchEvent(new Event('change', {bubbles: true}));
  return null;
}"""
_CLICK_JS = "function() { (this.nodeType === 3 ? this.parentElement : this).click(); }"
# Does clicking this node open a new tab (link or form with a target other than the current browsing context)?
_OPENS_TAB_JS = """(n) => {
  const e = (n.nodeType === 3 ? n.parentElement : n).closest('a[href], area[href], form');
  const t = ((e && (e.tagName === 'FORM' ? e.target : e.target)) || '').toLowerCase();
  return t !== '' && !['_self', '_parent', '_top'].includes(t);
}"""


class ActionFailed(Exception):
    """An action that cannot be carried out; becomes `ExecResult(ok=False, error=...)`."""


@dataclass
class ExecResult:
    ok: bool
    error: str | None = None
    done: bool = False
    answer: str | None = None


def execute(session: BrowserSession, action: Action, observation: Observation | None = None) -> ExecResult:
    """Run `action` on the session's active tab; `observation` resolves numeric ids (may be None for role targets)."""
    from playwright.sync_api import Error as PlaywrightError

    session.check_alive()
    try:
        done = _HANDLERS[action.verb](session, action, observation)
        if done is not None:
            return done
        if VERB_SPECS[action.verb].navigates:
            _settle(session)
    except ActionFailed as exc:
        return ExecResult(ok=False, error=str(exc))
    except PlaywrightError as exc:
        session.check_alive()  # a dead browser is not an action error: raise BrowserCrashed
        return ExecResult(ok=False, error=f"{action.to_text()} failed: {str(exc).splitlines()[0]}")
    return ExecResult(ok=True)


def _settle(session: BrowserSession) -> None:
    """Wait (bounded) for a navigation the action may have started, in the tab that is active afterwards."""
    from playwright.sync_api import Error as PlaywrightError

    deadline = time.monotonic() + session.timeout_ms / 1000
    page = session.active_page
    page.wait_for_timeout(150)  # a click's navigation request starts asynchronously; give it time to show up
    page = session.active_page  # a popup opened by the action is now the active tab
    while session.is_navigating(page) and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    try:
        page.wait_for_load_state("load", timeout=max(1.0, (deadline - time.monotonic()) * 1000))
    except PlaywrightError:
        pass  # slow subresources: the page is usable; the next observation shows what is there


# ---- element targets -------------------------------------------------------------------------------------------------
def _describe(target: int | RoleTarget, observation: Observation | None) -> str:
    if isinstance(target, RoleTarget):
        return target.to_text()
    role, name = observation.nodes.get(target, ("", "")) if observation else ("", "")
    return f"[{target}] ({role} '{name}')" if role else f"[{target}]"


def _backend_id(target: int, observation: Observation | None) -> int:
    if observation is None:
        raise ActionFailed(f"element [{target}] needs the observation it came from")
    if target not in observation.ids:
        top = max(observation.nodes, default=0)
        raise ActionFailed(f"there is no element [{target}] on this page; use an id from the page (1..{top})")
    return observation.ids[target]


def _object_id(session: BrowserSession, backend: int, target: int) -> str:
    from playwright.sync_api import Error as PlaywrightError

    try:
        return session.cdp_send("DOM.resolveNode", {"backendNodeId": backend})["object"]["objectId"]
    except PlaywrightError as exc:
        session.check_alive()
        raise ActionFailed(f"element [{target}] is no longer on the page (it changed); look at the new page") from exc


def _call(session: BrowserSession, object_id: str, js: str, *args: Any) -> Any:
    res = session.cdp_send(
        "Runtime.callFunctionOn",
        {"objectId": object_id, "functionDeclaration": js, "arguments": [{"value": a} for a in args],
         "returnByValue": True},
    )  # fmt: skip
    return res.get("result", {}).get("value")


def _centre(session: BrowserSession, backend: int) -> tuple[float, float] | None:
    """Viewport coordinates of the node's centre after scrolling it into view; None when it has no visible box."""
    from playwright.sync_api import Error as PlaywrightError

    try:
        session.cdp_send("DOM.scrollIntoViewIfNeeded", {"backendNodeId": backend})
        # One quad per line box: a link that wraps over two lines has a bounding box whose centre can fall between
        # its fragments (on the table cell, say), where a click does nothing; the first fragment's centre is on it.
        quads = session.cdp_send("DOM.getContentQuads", {"backendNodeId": backend}).get("quads") or []
    except PlaywrightError:
        return None
    width, height = session.viewport
    for quad in quads:
        xs, ys = quad[0::2], quad[1::2]
        if max(xs) - min(xs) < 1 or max(ys) - min(ys) < 1:
            continue
        x, y = sum(xs) / 4, sum(ys) / 4
        if 0 <= x < width and 0 <= y < height:
            return x, y
    return None


def _click_id(session: BrowserSession, target: int, observation: Observation | None, hover: bool = False) -> str:
    """Click (or hover) element `target`; returns its CDP object id for follow-up calls."""
    backend = _backend_id(target, observation)
    object_id = _object_id(session, backend, target)
    point = _centre(session, backend)
    page = session.active_page
    if point is None and hover:
        raise ActionFailed(f"element {_describe(target, observation)} is not visible; cannot hover it")
    if hover:
        page.mouse.move(*point)  # type: ignore[misc]
        return object_id
    opens_tab = bool(_call(session, object_id, f"function() {{ return ({_OPENS_TAB_JS})(this); }}"))
    with _expect_tab(session, opens_tab):
        if point is not None:
            page.mouse.click(*point)
        else:
            _call(session, object_id, _CLICK_JS)
    return object_id


@contextmanager
def _expect_tab(session: BrowserSession, opens_tab: bool) -> Iterator[None]:
    """Wait for the tab a `target=_blank` link opens: Chromium needs a few hundred ms to create it, longer than
    `_settle` waits, and the agent must see the new tab in its next observation."""
    if not opens_tab:
        yield
        return
    with session.context.expect_page(timeout=session.timeout_ms):
        yield


def _locator(session: BrowserSession, target: RoleTarget) -> Locator:
    page = session.active_page
    if target.role in ("StaticText", "text"):
        loc = page.get_by_text(target.name, exact=True).first
    else:
        loc = page.get_by_role(target.role, name=target.name, exact=True).first  # type: ignore[arg-type]
    if loc.count() == 0:
        raise ActionFailed(f"no {target.role} named '{target.name}' on this page")
    return loc


# ---- verbs -----------------------------------------------------------------------------------------------------------
def _click(session: BrowserSession, action: Action, observation: Observation | None) -> None:
    if isinstance(action.target, RoleTarget):
        locator = _locator(session, action.target)
        with _expect_tab(session, bool(locator.evaluate(_OPENS_TAB_JS))):
            locator.click()
    else:
        _click_id(session, action.target, observation)  # type: ignore[arg-type]


def _hover(session: BrowserSession, action: Action, observation: Observation | None) -> None:
    if isinstance(action.target, RoleTarget):
        _locator(session, action.target).hover()
    else:
        _click_id(session, action.target, observation, hover=True)  # type: ignore[arg-type]


def _type(session: BrowserSession, action: Action, observation: Observation | None, text: str | None = None) -> None:
    """Replace the field's content with the text (a <select> picks the option with that label), then maybe Enter."""
    text = action.text if text is None else text
    page = session.active_page
    target = action.target
    if isinstance(target, RoleTarget):
        loc = _locator(session, target)
        if loc.evaluate("e => e.tagName") == "SELECT":
            loc.select_option(label=text)
        else:
            loc.fill(text or "")
            if action.verb == "type" and action.press_enter:
                loc.press("Enter")
        return
    assert isinstance(target, int)
    backend = _backend_id(target, observation)
    kind = _call(session, _object_id(session, backend, target), _KIND_JS)
    if kind == "other":
        raise ActionFailed(f"element {_describe(target, observation)} is not a text field or a select; cannot type")
    object_id = _click_id(session, target, observation)
    if kind == "select":
        missing = _call(session, object_id, _SELECT_JS, text or "")
        if missing is not None:
            raise ActionFailed(f"no option '{text}' in {_describe(target, observation)}; options: {missing}")
        return
    _call(session, object_id, "function() { (this.nodeType === 3 ? this.parentElement : this).focus(); }")
    page.keyboard.press("Control+a")
    page.keyboard.press("Backspace")
    if text:
        page.keyboard.type(text)
    if action.verb == "type" and action.press_enter:
        page.keyboard.press("Enter")


def _clear(session: BrowserSession, action: Action, observation: Observation | None) -> None:
    _type(session, action, observation, text="")


def _press(session: BrowserSession, action: Action, observation: Observation | None) -> None:
    keys = "+".join(_KEY_NAMES.get(k.strip().lower(), k.strip()) for k in (action.key or "").split("+"))
    session.active_page.keyboard.press(keys)


def _scroll(session: BrowserSession, action: Action, observation: Observation | None) -> None:
    """Mouse wheel at the viewport centre: scrolls the document or the scrollable panel under the mouse."""
    page = session.active_page
    width, height = session.viewport
    page.mouse.move(width / 2, height / 2)
    page.mouse.wheel(0, (1 if action.direction == "down" else -1) * height * 0.8)
    page.wait_for_timeout(150)


def _goto(session: BrowserSession, action: Action, observation: Observation | None) -> None:
    page = session.active_page
    url = urljoin(page.url, action.url or "")
    if not session.policy.allows(url):
        session.blocked.append(url)
        allowed = ", ".join(sorted(session.policy.origins))
        raise ActionFailed(f"goto refused: {url} is not one of the task's sites ({allowed})")
    response = page.goto(url, wait_until="load")
    if response is not None and response.status >= 400:  # the error page stays open; the agent must know it failed
        raise ActionFailed(f"goto {url}: the site answered HTTP {response.status} {response.status_text}".rstrip())


def _history(session: BrowserSession, action: Action, observation: Observation | None) -> None:
    page: Page = session.active_page
    before = page.url
    (page.go_back if action.verb == "go_back" else page.go_forward)(wait_until="load")
    if page.url == before:
        where = "previous" if action.verb == "go_back" else "next"
        raise ActionFailed(f"{action.verb}: there is no {where} page in this tab's history")


def _tabs(session: BrowserSession, action: Action, observation: Observation | None) -> None:
    if action.verb == "new_tab":
        session.new_tab()
    elif action.verb == "close_tab":
        session.close_tab()
    else:
        try:
            session.tab_focus(action.index or 0)
        except IndexError as exc:
            raise ActionFailed(str(exc)) from exc


def _stop(session: BrowserSession, action: Action, observation: Observation | None) -> ExecResult:
    return ExecResult(ok=True, done=True, answer=action.answer or "")


# Each verb's executor, by the name its `VERB_TABLE` entry gives (a missing function fails at import).
_HANDLERS = {verb.verb: globals()[verb.executor] for verb in VERB_TABLE}
