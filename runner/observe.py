"""Reading the active tab into an `Observation`: the one place the agent's view touches the live browser.

Why apart from `agent.observation`: the pruning and rendering rules there are pure functions of the CDP payload,
testable and replayable without a browser; this module is the browser side (waiting for content, retrying a read
that a navigation interrupted, telling a dead browser from an unreadable page).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.observation import Observation, format_tree

if TYPE_CHECKING:
    from runner.browser import BrowserSession


class ObservationError(RuntimeError):
    """The page could not be read although the browser is alive (e.g. it kept navigating)."""


def observe(
    session: BrowserSession, max_nodes: int = 400, link_urls: bool = False, max_name_chars: int = 150
) -> Observation:
    """Observe the active tab. Raises `BrowserCrashed` if the browser died, `ObservationError` if the page stays unreadable; waits (bounded) for DOM content."""
    from playwright.sync_api import Error as PlaywrightError

    page = session.active_page
    session.chromium_pids()  # keep track of renderers spawned by navigation, so shutdown can reap them
    try:
        page.wait_for_load_state("domcontentloaded", timeout=session.timeout_ms)
    except PlaywrightError:
        pass  # a slow page is still observable; the tree shows what is there
    for attempt in range(2):
        try:
            tree = session.cdp_send("Accessibility.getFullAXTree", page=page)
            pages = session.pages
            tabs = [p.title() for p in pages]
            title = page.title()
            break
        except PlaywrightError as exc:
            session.check_alive()  # raises BrowserCrashed with the real reason when the browser died
            if attempt == 1:
                raise ObservationError(f"could not read the accessibility tree of {page.url}: {exc}") from exc
            page.wait_for_timeout(300)  # usually a navigation replaced the document mid-read; try once more
    lines, ids, nodes, truncated = format_tree(tree["nodes"], max_nodes, link_urls, max_name_chars)
    if truncated:
        lines.append(f"... {truncated} more elements not shown")
    return Observation(
        text="\n".join(lines),
        url=page.url,
        title=title,
        tabs=tabs,
        active_tab=pages.index(page),
        ids=ids,
        nodes=nodes,
        truncated=truncated,
    )
