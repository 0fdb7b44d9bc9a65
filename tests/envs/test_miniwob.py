"""MiniWoB++ adapter smoke test: our observation + executor solve click-button; a wrong click is penalized."""

from __future__ import annotations

import re

import pytest

from envs.miniwob import MiniWobEpisode, list_tasks


def test_task_list_and_unknown_task() -> None:
    tasks = list_tasks()
    assert "click-button" in tasks and "click-test" in tasks and len(tasks) > 100
    with pytest.raises(ValueError, match="unknown MiniWoB\\+\\+ task 'click-buton'; similar: click-"):
        MiniWobEpisode("click-buton")


@pytest.mark.browser
def test_click_button_right_and_wrong() -> None:
    from agent.actions import parse_action
    from runner.browser import BrowserSession
    from runner.executor import execute
    from runner.observe import observe

    with BrowserSession(allowed_origins=[], allow_file=True) as session:
        first = MiniWobEpisode("click-button", seed=7, session=session).start()
        again = MiniWobEpisode("click-button", seed=7, session=session).start()
        assert first == again  # seeded: the same problem

        wrong_done = right_done = False
        for seed in range(20):
            episode = MiniWobEpisode("click-button", seed=seed, session=session)
            wanted = re.fullmatch(r'Click on the "(.+)" button\.', episode.start()).group(1)
            obs = observe(session)
            buttons = {name: i for i, (role, name) in obs.nodes.items() if role == "button"}
            assert wanted in buttons, obs.text
            others = [i for name, i in buttons.items() if name != wanted]
            if not right_done:
                assert execute(session, parse_action(f"click [{buttons[wanted]}]"), obs).ok
                assert episode.done and episode.reward > 0
                right_done = True
            elif others:
                assert execute(session, parse_action(f"click [{others[0]}]"), obs).ok
                assert episode.done and episode.reward <= 0
                wrong_done = True
                break
        assert right_done and wrong_done
    assert session.chromium_pids() == set()
