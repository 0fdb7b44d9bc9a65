"""Agents: the language model behind one live Conf-KV cache (`ModelAgent`) and a scripted one (`ScriptedAgent`).

Names: an *agent* decides browser actions; a *KV policy* (`confkv.KVPolicy`) decides what the cache keeps.

Why one cache per episode: the anchor agent runtimes re-send the whole prompt every step, so prefill grows with the
episode. Here each step appends only the new chat turn (the previous reply's end marker, the new observation and
the assistant header) to the cache that already holds everything before it; `StepInfo.prefilled_tokens` records
exactly how many tokens went through the model, next to the logical context length `total_tokens`.

Every agent has the same small interface the episode loop uses (`Agent`):
    agent.begin(task_intent); text, info = agent.act(observation, last_result); agent.memory() ; agent.close()
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agent.bans import episode_bans, page_bans, repeat_ban
from agent.constrained import ActionGrammar, ConstrainedDecoder, token_index
from agent.prompt import ChatConversation, demo_turns, system_prompt, user_message
from agent.targets import to_ids, to_labels
from traces.records import DecodeToken, PrefillChunk

if TYPE_CHECKING:
    import torch

    from agent.observation import Observation
    from confkv.policy import KVPolicy

#: The agent's decision rules (bans, turn layout). Bump it when they change: it is part of an eval's run key
#: (`runner.worker.agent_identity`), so a resumed batch never mixes two agents. 2: `page_bans`; 3: a verb whose
#: targets are all banned is dropped for the turn (`ActionGrammar`); 4: a demonstration episode as chat turns;
#: 5: click/hover only on controls, goto only a URL, no `type` right after a submitted one (`repeat_ban`);
#: 6: as 5, but click/hover only avoid landmarks and containers (v5's ban on text/cells lost a pass at once);
#: 7: elements named by label (`click [link 'Cart']`, `agent.targets`), not by id;
#: 8: as 7, plus the episode rules of `episode_bans` (no `goto` after a failed one, two submitted types per field);
#: 9: as 8, plus a second demonstration episode (`agent.prompt.SORT_DEMO`: open the section, sort, read the first row).
AGENT_VERSION = 9
STOP_TOKEN_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "</s>")


@dataclass
class StepInfo:
    """What one decision cost and what the cache looked like (None where a policy has no model)."""

    raw_output: str
    observation_tokens: int | None = None
    prefilled_tokens: int | None = None  # tokens run through the model this step (new turn only)
    total_tokens: int | None = None  # logical context length after the step
    output_tokens: int | None = None  # generated tokens, stop token included
    prefill_ms: float | None = None
    decode_ms: float | None = None
    kept_tokens_per_layer: list[int] = field(default_factory=list)
    kv_bytes: int | None = None
    tokens: list[DecodeToken] = field(default_factory=list)  # one row per generated token (trace decode_tokens)
    prefill_chunks: list[PrefillChunk] = field(default_factory=list)  # this step's prefill calls (system prompt too)


@dataclass
class MemoryFigures:
    peak_kv_bytes: int
    full_kv_bytes: int
    gate_open_rate: float | None = None  # share of forwards the confidence gate opened on (None: ungated)


class Agent(Protocol):
    name: str
    model_name: str

    def begin(self, task_intent: str) -> None: ...
    def act(self, observation: Observation, last_result: str | None) -> tuple[str, StepInfo]: ...
    def memory(self) -> MemoryFigures | None: ...
    def close(self) -> None: ...


class ScriptedAgent:
    """Replays a fixed list of replies (e.g. a task's `reference_solution`): `tasks check` and tests use it.

    Replies are returned verbatim, so a list may hold malformed text to exercise parse failures. Once the list is
    exhausted (or, with `stop_on_failure`, once a step failed) it replies with an empty string (a parse failure),
    which lets the stop rules end the episode.
    """

    def __init__(self, actions: Sequence[str], name: str = "scripted", model_name: str = "scripted",
                 stop_on_failure: bool = False) -> None:
        self.actions = list(actions)
        self.name = name
        self.model_name = model_name
        self.stop_on_failure = stop_on_failure
        self.position = 0
        self.seen: list[tuple[Observation, str | None]] = []

    def begin(self, task_intent: str) -> None:
        self.position = 0
        self.seen = []

    def act(self, observation: Observation, last_result: str | None) -> tuple[str, StepInfo]:
        self.seen.append((observation, last_result))
        if self.stop_on_failure and last_result is not None and not last_result.startswith("OK"):
            self.position = len(self.actions)
        text = self.actions[self.position] if self.position < len(self.actions) else ""
        self.position += 1
        return text, StepInfo(raw_output=text)

    def memory(self) -> MemoryFigures | None:
        return None

    def close(self) -> None:
        pass


# Prefilled system-prompt caches: model -> {(KV policy, rendered text): session}. Weak on the model, so a model
# that is dropped takes its prefixes with it.
_PREFIXES: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], Any]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Decision:
    """One greedy reply decoded on a fork: the action in id form, the text as written, and the confidence of each
    distribution a token was chosen from (the first one picks the verb)."""

    action: str
    text: str
    confidences: tuple[float, ...]


def stop_token_ids(tokenizer: Any) -> list[int]:
    """End-of-turn ids: the tokenizer's EOS plus the usual chat end markers it knows."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    vocab = tokenizer.get_vocab()
    ids |= {vocab[t] for t in STOP_TOKEN_TEXTS if t in vocab}
    if not ids:
        raise ValueError("the tokenizer has no end-of-sequence token; cannot tell where a reply ends")
    return sorted(ids)


class ModelAgent:
    """A causal LM deciding actions through one `ConfKVSession` per episode (append-only chat, greedy decoding)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        kv_policy: KVPolicy | str = "confkv",
        constrained: bool = True,
        max_action_tokens: int = 48,
        reasoning: bool = False,
        model_name: str = "model",
        repeat_task: bool = True,
        labels: bool = True,
    ) -> None:
        from confkv.policies import get_policy

        self.model = model
        self.tokenizer = tokenizer
        self.kv_policy = get_policy(kv_policy) if isinstance(kv_policy, str) else kv_policy
        self.name = self.kv_policy.name
        self.model_name = model_name
        self.constrained = constrained
        self.reasoning = reasoning
        self.max_action_tokens = max_action_tokens + (64 if reasoning else 0)
        self.repeat_task = repeat_task
        self.labels = labels  # name elements by label in replies and prompt (`agent.targets`); False: by id
        self.last_labels: dict[int, str] = {}  # the labels of the page the last reply acted on
        self.stop_ids = stop_token_ids(tokenizer)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.index = token_index(tokenizer, self.vocab_size) if constrained else None
        self.session: Any = None
        self.chat: ChatConversation | None = None
        self.intent = ""
        self.step_no = 0
        self.system_tokens = 0
        self.records_seen = 0  # session records already reported (prefill chunks go with the next step)
        self.history: list[str] = []  # "OK: click [3]" / "FAILED: ..." per previous step, listed in each turn
        self.last_reply: str | None = None
        self.tried: set[tuple[str, str, tuple[str, str]]] = set()  # (url, verb, (role, name)) done this episode
        self.submits: dict[tuple[str, str], int] = {}  # field (role, name) -> submitted types this episode
        self.goto_failed = False  # a `goto` of this episode FAILED (`episode_bans`)
        self.prefix_reused = False  # whether this episode's system prompt came from the per-process prefix cache

    def begin(self, task_intent: str) -> None:
        """Start an episode: a fresh cache, and a chat holding the system prompt and the demonstration turns (the
        task comes each turn)."""
        from confkv.session import ConfKVSession

        self.close()
        system = system_prompt(self.reasoning, self.labels)
        if not self.repeat_task:
            system += f"\nYour task: {task_intent}\n"
        self.chat = ChatConversation(self.tokenizer, system, demo_turns(self.reasoning, self.labels))
        self.intent = task_intent
        self.step_no = 0
        self.records_seen = 0
        self.history = []
        self.last_reply = None
        self.last_labels = {}
        self.tried = set()
        self.submits = {}
        self.goto_failed = False
        # The system prompt and the demonstration are prefilled pinned (before the first chunk runs: the grammar and
        # rules must survive any budget), once per process, model, KV policy and text, and each episode starts from
        # a fork of that cache.
        # Each turn then pins itself before it is appended (see act), so the budget only governs older turns.
        head = self.chat.render(add_generation_prompt=False)
        self.chat.cached_text = head
        prefixes = _PREFIXES.setdefault(self.model, {})
        key = (repr(self.kv_policy), head)
        self.prefix_reused = key in prefixes
        if not self.prefix_reused:
            prefix = ConfKVSession(self.model, self.kv_policy, tokenizer=self.tokenizer)
            prefix.append(self.tokenizer(head, add_special_tokens=False).input_ids, pin=True)
            prefixes[key] = prefix
        self.session = prefixes[key].fork()
        self.system_tokens = self.session.seen

    def _hook(self, observation: Observation, last_result: str | None = None,
              labels: dict[int, str] | None = None) -> ConstrainedDecoder | None:
        if not self.constrained:
            return None
        assert self.index is not None
        avoid = page_bans(self.tried, observation)
        page_ids = observation.nodes or observation.ids
        held, drop = episode_bans(self.submits, self.goto_failed, observation)
        for verb, ids in [*repeat_ban(self.last_reply, last_result, page_ids).items(), *held.items()]:
            avoid.setdefault(verb, set()).update(ids)
        grammar = ActionGrammar(
            page_ids, n_tabs=len(observation.tabs),
            reasoning_chars=160 if self.reasoning else 0, avoid=avoid,
            roles={i: role for i, (role, _) in observation.nodes.items()}, labels=labels, drop=drop,
        )  # fmt: skip
        return ConstrainedDecoder(grammar, self.index, self.stop_ids, self.token_budget(labels))

    def token_budget(self, labels: dict[int, str] | None) -> int:
        """Most tokens one reply may take: a label cannot be cut short like free text, so the longest label's length
        in characters (a bound on its tokens) comes on top of `max_action_tokens`."""
        return self.max_action_tokens + max(map(len, (labels or {}).values()), default=0)

    def open_turn(self, observation: Observation, last_result: str | None) -> list[int]:
        """The new turn's token ids (previous reply's end marker, user message, assistant header), with the pins set
        for it; the caller appends them. Shared by `act` and the trajectory-forced eval (`runner.forced`), so both
        feed the cache exactly the same turns."""
        if self.session is None or self.chat is None:
            raise RuntimeError("call begin(task_intent) before act()")
        intent = self.intent if self.repeat_task else "see above"
        self.goto_failed |= bool(last_result and last_result.startswith("FAILED: goto"))
        if last_result and self.labels:  # the model reads its last action as it wrote it, not in the executor's ids
            last_result = to_labels(last_result, self.last_labels)
        if last_result:
            self.history.append(last_result)
        suffix = self.chat.user_turn(user_message(intent, observation, last_result, self.step_no, self.history))
        self.session.cache.pin([(0, self.system_tokens), (self.session.seen, None)])  # the previous turn is released
        return self.tokenizer(suffix, add_special_tokens=False).input_ids

    def close_turn(self, text: str, action: str | None = None, labels: dict[int, str] | None = None) -> None:
        """Record the reply the cache now holds (stop token excluded), the id form of its action when it named a
        label (`action`, with the page's `labels`), and advance the step counter."""
        assert self.chat is not None
        self.chat.assistant_reply(text)
        self.last_reply = action if action is not None else text
        self.last_labels = labels or {}
        self.step_no += 1

    def act(self, observation: Observation, last_result: str | None) -> tuple[str, StepInfo]:
        """Append the new turn (only its tokens), decode one reply, record per-token confidence and cache size."""
        session, tok = self.session, self.tokenizer
        ids = self.open_turn(observation, last_result)
        t0 = time.perf_counter()
        session.append(ids)
        t1 = time.perf_counter()
        prefills = [r for r in session.stats.steps[self.records_seen:] if r.kind == "prefill"]
        chunks = [PrefillChunk(i, r.tokens, min(1.0, max(0.0, float(r.confidence))), r.budget, r.kept_tokens,
                               r.kv_bytes) for i, r in enumerate(prefills)]  # fmt: skip
        rows: list[DecodeToken] = []

        def on_token(token: int, record: Any) -> None:
            rows.append(
                DecodeToken(
                    token_index=len(rows),
                    token_text=tok.decode([token], skip_special_tokens=False, clean_up_tokenization_spaces=False),
                    confidence=min(1.0, max(0.0, float(record.confidence))),
                    budget=record.budget if record.budget is not None else session.seen,  # full: everything kept
                    kept_tokens=record.kept_tokens,
                    kv_bytes=record.kv_bytes,
                )
            )

        labels = observation.labels() if self.labels else {}
        chosen: list[float] = []
        hook = _recording(self._hook(observation, last_result, labels or None), chosen)
        generated = session.decode(self.token_budget(labels), self.stop_ids, hook, on_token)
        self.end_turn(chosen)
        t2 = time.perf_counter()
        in_cache = generated[:-1] if generated and generated[-1] in self.stop_ids else generated
        text = tok.decode(in_cache, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        action = to_ids(text, labels) if labels else text  # what the executor, the bans and the traces act on
        self._remember(action, observation)
        self.close_turn(text, action, labels)
        self.records_seen = len(session.stats.steps)
        memory = session.cache.memory()
        return action, StepInfo(
            raw_output=text,
            observation_tokens=len(tok(observation.render(), add_special_tokens=False).input_ids),
            prefilled_tokens=len(ids),
            total_tokens=session.seen,
            output_tokens=len(generated),
            prefill_ms=(t1 - t0) * 1000,
            decode_ms=(t2 - t1) * 1000,
            kept_tokens_per_layer=list(memory.kept_tokens),
            kv_bytes=memory.kv_bytes,
            tokens=rows,
            prefill_chunks=chunks,
        )

    def decide(self, observation: Observation, last_result: str | None) -> tuple[str, str]:
        """The reply `act` would give now, decoded greedily on a fork of the live cache, which is left as it is:
        (action in id form, text as written). Call after the turn's ids (`open_turn`) are appended. Why a fork: the
        replay and forced evaluations score the decision at every step and then feed the recorded or reference
        reply, so the decision must not enter the cache they go on with."""
        decision = self.decision(observation, last_result)
        return decision.action, decision.text

    def decision(self, observation: Observation, last_result: str | None) -> Decision:
        """`decide`, with the confidence of every distribution a reply token was chosen from (raw logits, before the
        grammar's mask; the paper's formula): what a turn-level gate would read. The traces' per-token confidence
        is the distribution *after* each token, the one the cache's gate acts on, so it misses the first choice."""
        labels = observation.labels() if self.labels else {}
        chosen: list[float] = []
        recording = _recording(self._hook(observation, last_result, labels or None), chosen)
        fork = self.session.fork()
        generated = fork.decode(self.token_budget(labels), self.stop_ids, recording)
        in_cache = generated[:-1] if generated and generated[-1] in self.stop_ids else generated
        text = self.tokenizer.decode(in_cache, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return Decision(to_ids(text, labels) if labels else text, text, tuple(chosen))

    def end_turn(self, confidences: Sequence[float]) -> None:
        """Report a finished decision to the cache: its least confident choice is what a turn-level gate reads
        (`ConfKVCache.end_turn`; other gates ignore it). `act` calls it; the forced and replay evaluations call it
        with the decision they decoded on a fork, before they force the reference reply, so the gate acts on the
        agent's own uncertainty at that step."""
        if confidences and self.session is not None:
            self.session.cache.end_turn(min(confidences))

    def force_reply(self, written: str, action: str, observation: Observation, all_logits: bool = False) -> Any:
        """Append a reply the agent did not decode (a recorded or reference one: `written` as the model writes it,
        `action` its id form) and close the turn as `act` would, bans included. Returns the append's logits (every
        position's with `all_logits`: the forced eval scores the reply's own tokens from them)."""
        logits = self.session.append(self.tokenizer(written, add_special_tokens=False).input_ids, all_logits=all_logits)
        self._remember(action, observation)
        self.close_turn(written, action, observation.labels() if self.labels else {})
        return logits

    def _remember(self, text: str, observation: Observation) -> None:
        """Note (url, verb, element) of the reply for `page_bans`, and a submitted type's field for `episode_bans`."""
        from agent.actions import ActionParseError, parse_action

        try:
            action = parse_action(text)
        except ActionParseError:
            return
        node = observation.nodes.get(action.target) if isinstance(action.target, int) else None
        if node is not None:
            self.tried.add((observation.url, action.verb, node))
            if action.verb == "type" and action.press_enter:
                self.submits[node] = self.submits.get(node, 0) + 1

    def memory(self) -> MemoryFigures | None:
        if self.session is None:
            return None
        cache = self.session.cache
        return MemoryFigures(peak_kv_bytes=int(cache.peak_kv_bytes), full_kv_bytes=int(cache.full_kv_bytes()),
                             gate_open_rate=cache.gate_open_rate)

    def close(self) -> None:
        """Drop the episode's cache (its memory is freed with it)."""
        self.session = None
        self.chat = None


def _recording(hook: Any, chosen: list[float]) -> Any:
    """`hook` (the grammar's mask, or None) that first appends the confidence of the raw distribution each reply
    token is chosen from (the paper's formula, before any mask) to `chosen`."""
    from confkv.confidence import confidence

    def recording(logits: Any, generated: list[int]) -> Any:
        chosen.append(float(confidence(logits[None].float())[0]))
        return hook(logits, generated) if hook is not None else logits

    return recording
