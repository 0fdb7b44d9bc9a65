"""Decision replay: the agent's greedy action at every recorded state, under a given precision and KV policy.

Why: a free-running episode is one path, and one early different step hides every later one, so "does bf16 (or INT8,
or a KV policy) change what the agent does?" cannot be read off success rates of a few episodes. Here each recorded
episode of a trace DB is teacher-forced turn by turn into one live cache exactly as the agent fed it
(`ModelAgent.open_turn`, then the recorded reply through `ModelAgent.force_reply`, bans included), and at every step
the agent's constrained greedy decision is decoded on a fork of the cache (`ModelAgent.decide`). Two configurations
see the same states, so their decisions compare state by state: agreement with a reference configuration (fp32,
`full`) per site, and with the recorded action as a check that the replay is faithful.

Results go to one JSON-lines file per configuration (an episode per line), so a long replay resumes where it stopped
and several processes can each run one configuration.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.observation import Observation
from agent.targets import to_labels
from runner.heap import trim_heap


def site_of(task_id: str) -> str:
    """The site of a task id in the shipped suite (1-99 shopping, 101-199 classifieds, 201-299 forum, 301+
    cross-site); other ids (MiniWoB names) are their own site."""
    if not task_id.isdigit():
        return task_id.split("-")[0]
    n = int(task_id)
    return "shopping" if n < 100 else "classifieds" if n < 200 else "forum" if n < 300 else "cross-site"


@dataclass(frozen=True)
class RecordedStep:
    observation: str  # the rendered observation as stored (tabs line, URL line, tree)
    action: str  # the id form the executor ran (or the raw output where it did not parse)
    result: str | None  # what the executor reported ("OK: ...", "FAILED: ...")


@dataclass(frozen=True)
class RecordedEpisode:
    episode_id: int
    task_id: str
    intent: str
    steps: tuple[RecordedStep, ...]

    @property
    def site(self) -> str:
        return site_of(self.task_id)


def observation_from_record(text: str) -> Observation:
    """A stored observation back as an `Observation` (ids, roles and names are all the grammar needs)."""
    lines = text.splitlines()
    tabs = re.findall(r"\[\d+\] '((?:[^'\\]|\\.)*)'", lines[0]) or ["page"]
    return Observation.from_text("\n".join(lines[2:]), lines[1].removeprefix("URL: "), tabs[0], tabs)


def select_episodes(db: str | Path, run: int, states_per_site: int, intents: dict[str, str],
                    episodes_per_site: int = 7, sites: Sequence[str] = ("shopping", "classifieds", "forum"),
                    ) -> list[RecordedEpisode]:  # fmt: skip
    """The finished episodes of `run`, per site the cheapest first (fewest context tokens per state) until the site
    has `states_per_site` states in at least `episodes_per_site` episodes: a fixed, reproducible sample that covers
    every site (and not only its long episodes, which are the cheapest per state)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "select e.id, e.task_id, max(s.total_tokens), count(s.step) from episodes e join steps s "
            "on s.episode_id = e.id where e.run_id = ? and e.status = 'done' group by e.id", (run,)).fetchall()
        chosen: list[RecordedEpisode] = []
        for site in sites:
            count = 0
            for ep, task, _, n in sorted((r for r in rows if site_of(str(r[1])) == site), key=lambda r: r[2] / r[3]):
                if count >= states_per_site and len([e for e in chosen if e.site == site]) >= episodes_per_site:
                    break
                if str(task) not in intents:
                    continue
                chosen.append(read_episode(conn, ep, str(task), intents[str(task)]))
                count += n
        return chosen
    finally:
        conn.close()


def read_episode(conn: sqlite3.Connection, episode_id: int, task_id: str, intent: str) -> RecordedEpisode:
    steps = conn.execute("select observation, coalesce(action, raw_output), result from steps where episode_id = ? "
                         "order by step", (episode_id,)).fetchall()  # fmt: skip
    return RecordedEpisode(episode_id, task_id, intent, tuple(RecordedStep(*s) for s in steps))


def replay_episode(agent: Any, episode: RecordedEpisode) -> list[dict[str, Any]]:
    """Teacher-force `episode` into `agent`'s fresh cache; per step the agent's own decision and the recorded one."""
    agent.begin(episode.intent)
    out, last = [], None
    for step in episode.steps:
        obs = observation_from_record(step.observation)
        agent.session.append(agent.open_turn(obs, last))
        t0 = time.perf_counter()
        decided = agent.decision(obs, last)
        action, text = decided.action, decided.text
        agent.end_turn(decided.confidences)  # a turn-level gate acts on the agent's own decision, as in forced mode
        out.append({"decision": action, "text": text, "recorded": step.action,
                    "decide_s": round(time.perf_counter() - t0, 2), "context": agent.session.seen,
                    "kv_bytes": agent.session.cache.memory().kv_bytes})  # fmt: skip
        labels = obs.labels() if agent.labels else {}
        agent.force_reply(to_labels(step.action, labels), step.action, obs)
        last = step.result
        trim_heap()  # freed prefill and fork buffers: 18 GB held at 16K tokens without it (runner.heap)
    memory = agent.memory()
    if memory is not None and out:
        out[-1]["peak_kv_bytes"], out[-1]["full_kv_bytes"] = memory.peak_kv_bytes, memory.full_kv_bytes
    agent.close()
    return out


def results_path(out_dir: str | Path, model: str, precision: str, policy: str) -> Path:
    return Path(out_dir) / f"decisions_{Path(model).name}_{precision}_{policy}.jsonl"


def shard_path(path: Path, shard: tuple[int, int]) -> Path:
    """Where shard `k` of `n` appends (each process its own file, so no two processes write one file)."""
    k, n = shard
    return path if n == 1 else path.with_name(f"{path.stem}.shard{k}of{n}{path.suffix}")


def done_episodes(path: Path) -> dict[int, dict[str, Any]]:
    """Episode id -> its replay, from a results file and its shard files (a torn last line, from a killed run, is
    ignored)."""
    out = {}
    for part in [path, *sorted(path.parent.glob(f"{path.stem}.shard*{path.suffix}"))]:
        try:
            lines = part.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            out[int(row["episode_id"])] = row
    return out


def run_replays(episodes: Sequence[RecordedEpisode], make_agent: Callable[[], Any], path: Path,
                progress: Callable[[str], None] = lambda _: None,
                shard: tuple[int, int] = (0, 1)) -> dict[int, dict[str, Any]]:  # fmt: skip
    """Replay every episode not yet in `path` (or its shard files) and append it; returns all of them. With
    `shard=(k, n)` only the episodes whose index is k mod n, into `shard_path`: n processes split one sample."""
    done = done_episodes(path)
    out_path = shard_path(path, shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    agent = None
    for i, ep in enumerate(episodes):
        if ep.episode_id in done or i % shard[1] != shard[0]:
            continue
        agent = agent or make_agent()
        t0 = time.perf_counter()
        steps = replay_episode(agent, ep)
        row = {"episode_id": ep.episode_id, "task_id": ep.task_id, "site": ep.site, "steps": steps,
               "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
        with out_path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        done[ep.episode_id] = row
        progress(f"{out_path.name}: episode {ep.episode_id} (task {ep.task_id}, {len(steps)} steps) in "
                 f"{row['seconds']:.0f} s [{i + 1}/{len(episodes)}]")  # fmt: skip
    return done


def agreement(reference: dict[int, dict[str, Any]], other: dict[int, dict[str, Any]],
              key: str = "decision") -> dict[str, Any]:  # fmt: skip
    """Share of states where `other`'s decision equals `reference`'s `key` ("decision", or "recorded" to check the
    replay), overall and per site, over the episodes both hold; with the differing states."""
    per: dict[str, list[int]] = {}
    differ = []
    for ep, ref in sorted(reference.items()):
        row = other.get(ep)
        if row is None:
            continue
        for k, (a, b) in enumerate(zip(ref["steps"], row["steps"], strict=True)):
            same = int(a[key].strip() == b["decision"].strip())
            per.setdefault(ref["site"], []).append(same)
            if not same:
                differ.append({"episode_id": ep, "step": k, "reference": a[key], "other": b["decision"]})
    every = [x for v in per.values() for x in v]
    return {"states": len(every), "agreement": sum(every) / len(every) if every else None,
            "per_site": {s: {"states": len(v), "agreement": sum(v) / len(v)} for s, v in sorted(per.items())},
            "differ": differ}  # fmt: skip


def recorded_reference(db: str | Path, run: int, policy: str, identity: dict[str, Any]) -> str | None:
    """Why `run`'s recorded actions may stand for fp32's greedy decisions under `policy` (None: they may not).

    They may when the run was this very agent (decision rules' version and prompt hash, `identity`), in fp32, under
    the same KV policy: then the recorded action at each state *is* fp32's greedy decision, and a candidate
    precision is compared with it without replaying fp32 again (a replay of fp32 reproduces it; the replay's
    `= recorded` column checks that)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute("select policy, policy_config from runs where id = ?", (run,)).fetchone()
    finally:
        conn.close()
    if row is None:
        return None
    config = json.loads(row[1] or "{}")
    agent = config.get("agent", {})
    if row[0] != policy or agent.get("dtype") != "fp32" or agent.get("reasoning"):
        return None
    if agent.get("version") != identity["version"] or agent.get("prompt_sha") != identity["prompt_sha"]:
        return None
    return f"run {run}'s recorded actions (fp32, {policy}, agent v{agent['version']} prompt {agent['prompt_sha']})"


def acceptance_record(row: dict[str, Any], planned: int, reference: str, run: int, db: str | Path) -> dict[str, Any]:
    """One precision's decision-agreement record, as `confkv.models.precision_choice.acceptance` reads it."""
    result = row["vs_reference"]
    return {"agreement": result["agreement"], "states": result["states"], "planned": planned,
            "per_site": result["per_site"], "reference": reference, "policy": row["policy"],
            "db": Path(db).name, "run": run, "date": time.strftime("%Y-%m-%d")}  # fmt: skip


def write_acceptance(path: Path, model: str, records: dict[str, dict[str, Any]]) -> Path:
    """Merge `records` (precision -> record) into the acceptance file at `path` under `model`; atomic."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault(model, {}).setdefault("precisions", {}).update(records)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
