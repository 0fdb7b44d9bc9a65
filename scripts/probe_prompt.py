"""Which action does the agent choose at recorded states, under prompt variants? A cheap A/B for prompt changes.

A whole free-running episode costs minutes and one early wrong step hides the rest; `bench actions` decides from a
fresh cache with no history, which misses loops that come from the history. This replays a recorded episode's
first k turns (the same observations and the agent's own recorded replies, teacher-forced into one `full` cache)
and decodes the reply at step k with the real constrained decoder, once per prompt variant.

    PYTHONPATH=. .venv/bin/python scripts/probe_prompt.py runs/sample.sqlite 1:1 2:1 --variants base,no_demo

`--policy confkv --set int8_after=none` replays into that KV policy's cache instead (the pins as in a live
episode): where an evicting policy's episode left `full`'s path, this tells eviction from INT8 from the prompt.
States are `episode:step`. Observations are rebuilt from the stored text (ids, roles and names are all the
grammar needs). Variants are defined below; `base` is the prompt as shipped.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import time

import agent.prompt as prompt
from agent.observation import Observation, compact_tree
from agent.targets import to_ids, to_labels

NUDGE = "If the page above shows the answer to the task, reply stop [answer] now.\nYour next action:"
VARIANTS = {
    "base": {},
    "nudge": {"next": NUDGE},
    "free": {"agent": {"constrained": False}},
    "reason": {"agent": {"reasoning": True}},
    "no_demo": {"no_demo": True},  # the system prompt alone (agent version 3 and before)
    "ids": {"agent": {"labels": False}},  # elements named by id (agent version 6 and before)
    "task_last": {"task_last": True},  # the task repeated after the page, right before the reply (not adopted)
    "one_demo": {"demos": ("SEARCH_DEMO",)},  # the search demonstration alone (agent version 8 and before)
    "compact": {"compact": True},  # pages and demos as `agent.observation.compact_tree` shows them (a candidate)
    "form_demo": {"demos": ("FORM_DEMO", "SORT_DEMO", "SEARCH_DEMO")},  # + type, submit, stop [] (a candidate)
    "inbox_demo": {"demos": ("INBOX_DEMO", "SORT_DEMO", "SEARCH_DEMO")},  # + the account's own pages (a candidate)
    "no_goto": {"no_goto": True},  # `goto` dropped from the first step, as after a failed one (probed: 1 of 8 better)
}


def observation(text: str, compact: bool = False) -> Observation:
    lines = text.splitlines()
    tabs_line, url_line, tree = lines[0], lines[1], "\n".join(lines[2:])
    tabs = re.findall(r"\[\d+\] '((?:[^'\\]|\\.)*)'", tabs_line) or ["page"]
    return Observation.from_text(compact_tree(tree) if compact else tree, url_line.removeprefix("URL: "), tabs[0], tabs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("states", nargs="+")
    ap.add_argument("--variants", default="base,nudge")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--policy", default="full", help="KV policy of the replay cache")
    ap.add_argument("--set", action="append", default=[], help="policy override key=value (repeatable)")
    args = ap.parse_args()
    from confkv.policies import get_policy, parse_overrides

    kv_policy = get_policy(args.policy, parse_overrides(args.set))
    from agent.model_policy import ModelAgent
    from confkv.models import load_for_inference

    model, tok = load_for_inference(args.model, "auto")
    conn = sqlite3.connect(args.db)
    import agent.model_policy as mp
    from envs import TASKS_DIR
    from envs.taskspec import load_tasks

    tasks = {str(t.task_id): t for t in load_tasks(TASKS_DIR)}
    original_user_message = prompt.user_message
    for state in args.states:
        ep, k = map(int, state.split(":"))
        task = tasks[conn.execute("select task_id from episodes where id=?", (ep,)).fetchone()[0]]
        sql = "select observation, coalesce(action, raw_output), result from steps where episode_id=? order by step"
        steps = conn.execute(sql, (ep,)).fetchall()
        for name in args.variants.split(","):
            variant = VARIANTS[name]

            def user_message(*a, _v=variant, **kw):  # noqa: ANN002, ANN003, ANN202
                text = original_user_message(*a, **kw)
                if _v.get("task_last"):
                    text = text.replace("\nYour next action:", f"\nThe task: {a[0]}\nYour next action:")
                return text.replace("Your next action:", _v["next"]) if "next" in _v else text

            prompt.user_message = user_message
            mp.user_message = user_message
            demos = tuple(getattr(prompt, name) for name in variant.get("demos", ())) or prompt.DEMOS
            compact = bool(variant.get("compact"))
            mp.demo_turns = (lambda reasoning=False, labels=True: []) if variant.get("no_demo") else (
                lambda reasoning=False, labels=True, _d=demos, _c=compact: prompt.demo_turns(reasoning, labels, _d, _c))
            agent = ModelAgent(model, tok, kv_policy, model_name=args.model, **variant.get("agent", {}))
            agent.begin(task.intent)
            if variant.get("no_goto"):
                agent.goto_failed = True
            last = None
            for i in range(k):
                obs_text, reply, result = steps[i]
                obs = observation(obs_text, compact)
                ids = agent.open_turn(obs, last)
                labels = obs.labels() if agent.labels else {}
                # a recorded id-form reply, as this variant's agent writes it (named by label on the recorded page)
                recorded = observation(obs_text).labels() if compact else labels
                written = to_labels(reply, recorded)
                if compact:  # the ids of the compact page, for the bans and the next turn's last action
                    reply = to_ids(written, labels)
                    result = result and to_ids(to_labels(result, recorded), labels)
                agent.session.append(ids)
                agent.session.append(tok(written, add_special_tokens=False).input_ids)
                agent._remember(reply, obs)  # the page bans see the replayed steps too
                agent.close_turn(written, reply, labels)
                last = result
            t0 = time.perf_counter()
            text, info = agent.act(observation(steps[k][0], compact), last)
            print(f"{state} task {task.task_id} {name:8s} {args.policy} {' '.join(args.set)} -> {info.raw_output!r} = "
                  f"{text!r} (recorded {steps[k][1]!r}) "
                  f"({time.perf_counter() - t0:.1f} s)",
                  flush=True)  # fmt: skip
            agent.close()


if __name__ == "__main__":
    main()
