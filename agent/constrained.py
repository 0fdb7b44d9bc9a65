"""Grammar-constrained greedy decoding of one action, as a `logits_hook` for `ConfKVSession.decode`.

Why: a small model's failures are mostly format failures (prose, invented verbs, ids that are not on the page).
Masking every token that would make the output stop being a valid prefix of an action fixes all of those at no
quality cost. Confidence is untouched: the session computes it from the raw logits before this hook runs.

The grammar is a small NFA over characters. Each verb is a template of segments: a `Choice` among a finite set of
strings (verbs, ids on the current page, `0|1`, `up|down`, key names, tab indices) or a bounded `Free` text (the
`type` text, the `goto` URL, the `stop` answer, optional reasoning). Per decoding step we need the set of vocabulary
tokens whose characters keep the NFA alive, for a vocabulary of up to 150k tokens:

- tokens made only of "plain" characters (printable, no `[` or `]`) can only ever continue a `Free` segment (every
  segment after a `Free` starts with one of its forbidden characters, checked at construction), so while the NFA is
  in a free segment they are allowed with one vectorized mask (plain and short enough);
- the few thousand tokens holding a bracket or newline are simulated one by one from the free states;
- literal states are expanded with a depth-first walk over the SORTED token strings (bisect gives the block of tokens
  that start with a prefix), so the cost is proportional to the allowed tokens, not to the vocabulary.

Free text is bounded in characters, and in tokens: when the reply is about to exceed `max_tokens`, free segments are
closed so the action always completes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agent.actions import VERB_TABLE, Verb

SPECIAL_CHARS = "[]"  # with every non-printable char (newlines, tabs, controls): what may end a free segment
FREE_FORBIDDEN = "[]"  # inside type text / goto url / stop answer (non-printable chars are never free text)
KEYS = (
    "Enter", "Tab", "Escape", "Backspace", "Delete", "ArrowDown", "ArrowUp", "ArrowLeft", "ArrowRight",
    "PageDown", "PageUp", "Home", "End", "Space", "Control+a", "Control+c", "Control+v",
)  # fmt: skip
CLOSE_RESERVE_TOKENS = 8  # tokens kept to close an open free segment (`] [1]`) before max_tokens


@dataclass(frozen=True)
class Choice:
    options: frozenset[str]

    @staticmethod
    def of(*options: str) -> Choice:
        return Choice(frozenset(options))


@dataclass(frozen=True)
class Free:
    max_chars: int
    forbidden: str = FREE_FORBIDDEN


Segment = Choice | Free
# NFA state: (template index, segment index, progress). progress = matched text for a Choice, a char count for Free.
State = tuple[int, int, Any]


def _free_char(ch: str, seg: Free) -> bool:
    """Free text is printable and holds none of the segment's forbidden characters (so the reply stays one line)."""
    return ch.isprintable() and ch not in seg.forbidden


def lit(text: str) -> Choice:
    return Choice.of(text)


class ActionGrammar:
    """The WebArena action language for one observation (its ids and tabs)."""

    def __init__(
        self,
        ids: Iterable[int],
        n_tabs: int = 1,
        text_chars: int = 80,
        url_chars: int = 160,
        answer_chars: int = 120,
        reasoning_chars: int = 0,
        avoid: dict[str, set[int]] | None = None,
        roles: dict[int, str] | None = None,
        labels: dict[int, str] | None = None,
        drop: Iterable[str] = (),
    ) -> None:
        # `labels` (id -> `role 'name'`, `Observation.labels`): targets are written as labels, not ids (`agent.targets`
        # maps them back). Bans and role filters below still work on ids.
        def key(i: int) -> str:
            return labels[i] if labels and i in labels else str(i)

        # `avoid`: per verb, target ids it may not take this turn (the agent bans re-typing into the field it just
        # filled, and what it already did from this page). A verb left with no target is dropped for the turn:
        # keeping it with its full choice let the 1.5B agent, whose first choice is `type` on almost every page,
        # cycle through the same fields. Verbs without a target (scroll, go_back, stop, ...) always remain.
        self.avoid = {verb: {key(i) for i in ids_} for verb, ids_ in (avoid or {}).items()}
        self.drop = frozenset(drop)  # verbs not offered at all this turn (the agent's episode rules, `episode_bans`)
        # `roles` (observation id -> AX role): a verb's target must have one of its `target_roles` and none of its
        # `skip_roles` (a page with no such element keeps every id: the verb stays expressible, the executor reports).
        ids = list(ids)
        self.role_targets: dict[str, Choice] = {}
        for verb in VERB_TABLE:
            if roles and (verb.target_roles or verb.skip_roles):
                allowed = {key(i) for i in ids if (verb.target_roles is None or roles.get(i) in verb.target_roles)
                           and roles.get(i) not in verb.skip_roles}
                if allowed:
                    self.role_targets[verb.verb] = Choice(frozenset(allowed))
        # One segment per argument kind of `agent.actions.VERB_TABLE` (a new verb needs no edit here; a new kind does).
        self.arg_segments: dict[str, Segment] = {
            "target": Choice(frozenset(key(i) for i in ids) or frozenset({"0"})),
            "text": Free(text_chars),
            "enter": Choice.of("0", "1"),
            "key": Choice(frozenset(KEYS)),
            "direction": Choice.of("up", "down"),
            "index": Choice(frozenset(str(i) for i in range(max(1, n_tabs)))),
            "url": Free(url_chars),
            "answer": Free(answer_chars),
        }
        templates = [t for t in (self.template(verb) for verb in VERB_TABLE) if t is not None]
        if reasoning_chars:
            head: list[Segment] = [Free(reasoning_chars, forbidden=""), lit("\nAction: ")]
            templates = [head + t for t in templates]
        for t in templates:
            for seg, nxt in zip(t, t[1:], strict=False):
                if isinstance(seg, Free) and not set(seg.forbidden) <= set(SPECIAL_CHARS):
                    raise ValueError(f"free segments may only forbid characters among {SPECIAL_CHARS!r}")
                if isinstance(seg, Free) and not all(not _free_char(o[:1], seg) for o in nxt.options):  # type: ignore[union-attr]
                    raise ValueError("a free segment must be followed by a segment starting with a forbidden char")
        self.templates = templates

    def template(self, verb: Verb) -> list[Segment] | None:
        """The verb's canonical form `verb [arg] [arg]` as segments (what `Action.to_text` writes); None when
        `avoid` bans every target it has, or the verb is in `drop`."""
        if verb.verb in self.drop:
            return None
        if not verb.args:
            return [lit(verb.verb)]
        segments: list[Segment] = [lit(f"{verb.verb} [")]
        for i, kind in enumerate(verb.args):
            seg = self.arg_segments[kind]
            if kind == "target" and verb.verb in self.role_targets:
                seg = self.role_targets[verb.verb]
            if kind == "url":  # an absolute or site-relative URL: the 1.5B agent wrote `goto [1]` meaning an id
                segments.append(Choice.of("http", "/"))
            if kind == "target" and self.avoid.get(verb.verb) and isinstance(seg, Choice):
                allowed = seg.options - self.avoid[verb.verb]
                if not allowed:
                    return None
                seg = Choice(allowed)
            segments += [seg, lit("] [" if i < len(verb.args) - 1 else "]")]
        return segments

    # -- NFA ---------------------------------------------------------------------------------------------------
    def start(self) -> frozenset[State]:
        return self._closure({(t, 0, "" if isinstance(segs[0], Choice) else 0) for t, segs in enumerate(self.templates)})

    def _closure(self, states: Iterable[State]) -> frozenset[State]:
        """Add the epsilon moves: a completed Choice or any Free may hand over to the next segment."""
        out: set[State] = set()
        stack = list(states)
        while stack:
            st = stack.pop()
            if st in out:
                continue
            out.add(st)
            t, s, prog = st
            segs = self.templates[t]
            if s >= len(segs):
                continue
            seg = segs[s]
            if isinstance(seg, Free) or prog in seg.options:
                nxt = s + 1
                stack.append((t, nxt, 0 if nxt < len(segs) and isinstance(segs[nxt], Free) else ""))
        return frozenset(out)

    def step_char(self, states: frozenset[State], ch: str, free_open: bool = True) -> frozenset[State]:
        moved: set[State] = set()
        for t, s, prog in states:
            segs = self.templates[t]
            if s >= len(segs):
                continue
            seg = segs[s]
            if isinstance(seg, Free):
                if free_open and prog < seg.max_chars and _free_char(ch, seg):
                    moved.add((t, s, prog + 1))
            else:
                p = prog + ch
                if any(o.startswith(p) for o in seg.options):
                    moved.add((t, s, p))
        return self._closure(moved) if moved else frozenset()

    def advance(self, states: frozenset[State], text: str, free_open: bool = True) -> frozenset[State]:
        for ch in text:
            states = self.step_char(states, ch, free_open)
            if not states:
                break
        return states

    def accepts(self, states: frozenset[State]) -> bool:
        return any(s >= len(self.templates[t]) for t, s, _ in states)

    def next_chars(self, states: Iterable[State]) -> set[str]:
        """Characters a literal (Choice) state can take next; free states are handled separately."""
        chars: set[str] = set()
        for t, s, prog in states:
            segs = self.templates[t]
            if s < len(segs) and isinstance(segs[s], Choice):
                chars.update(o[len(prog)] for o in segs[s].options if len(o) > len(prog) and o.startswith(prog))
        return chars

    def free_room(self, states: Iterable[State]) -> int:
        """Most characters any free state may still take (0 when none is in a free segment)."""
        room = 0
        for t, s, prog in states:
            segs = self.templates[t]
            if s < len(segs) and isinstance(segs[s], Free):
                room = max(room, segs[s].max_chars - prog)
        return room


class TokenIndex:
    """Per-tokenizer precomputation: every token's decoded string, sorted for prefix search, and masks."""

    def __init__(self, tokenizer: Any, vocab_size: int | None = None) -> None:
        n = len(tokenizer)
        size = max(n, vocab_size or 0)
        special = set(tokenizer.all_special_ids) | {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {})}
        strings = tokenizer.batch_decode([[i] for i in range(n)], clean_up_tokenization_spaces=False)
        self.strings: list[str] = [""] * size
        usable = torch.zeros(size, dtype=torch.bool)
        for i, s in enumerate(strings):
            if i in special or not s or "\ufffd" in s:  # special tokens and partial UTF-8 bytes never go in an action
                continue
            self.strings[i] = s
            usable[i] = True
        lengths = torch.tensor([len(s) for s in self.strings])
        has_special = torch.tensor([not s.isprintable() or any(c in s for c in SPECIAL_CHARS) for s in self.strings])
        self.size = size
        self.lengths = lengths
        self.plain = usable & ~has_special
        self.special_ids = [i for i in range(size) if usable[i] and has_special[i]]
        order = sorted((i for i in range(size) if usable[i]), key=lambda i: self.strings[i])
        self.sorted_ids = order
        self.sorted_strings = [self.strings[i] for i in order]

    def prefix_range(self, prefix: str) -> tuple[int, int]:
        lo = bisect.bisect_left(self.sorted_strings, prefix)
        hi = bisect.bisect_left(self.sorted_strings, prefix + "\U0010ffff")
        return lo, hi


_INDEX_CACHE: dict[tuple[int, int], TokenIndex] = {}


def token_index(tokenizer: Any, vocab_size: int | None = None) -> TokenIndex:
    """The (cached) TokenIndex of a tokenizer: built once, a few seconds for a 150k vocabulary."""
    key = (id(tokenizer), vocab_size or 0)
    if key not in _INDEX_CACHE:
        _INDEX_CACHE[key] = TokenIndex(tokenizer, vocab_size)
    return _INDEX_CACHE[key]


class ConstrainedDecoder:
    """A stateful `logits_hook(logits, generated) -> logits` that only lets valid action prefixes through.

    Build one per decision (the ids change every page). `stop_ids` are allowed exactly when a complete action has
    been generated; `max_tokens` should equal decode's `max_new_tokens` so free text is closed in time.
    """

    def __init__(self, grammar: ActionGrammar, index: TokenIndex, stop_ids: Sequence[int], max_tokens: int) -> None:
        self.grammar = grammar
        self.index = index
        self.stop_ids = list(stop_ids)
        self.max_tokens = max_tokens
        self.states = grammar.start()
        self._consumed = 0
        self.text = ""

    def __call__(self, logits: torch.Tensor, generated: list[int]) -> torch.Tensor:
        for tok in generated[self._consumed :]:
            piece = self.index.strings[tok] if tok < self.index.size else ""
            self.states = self.grammar.advance(self.states, piece)
            self.text += piece
        self._consumed = len(generated)
        allowed = self.allowed_mask(free_open=len(generated) < self.max_tokens - CLOSE_RESERVE_TOKENS)
        allowed = allowed[: logits.shape[-1]]
        if not bool(allowed.any()):  # dead end (should not happen): let the reply end; the parser reports it
            allowed[self.stop_ids] = True
        return logits.masked_fill(~allowed.to(logits.device), float("-inf"))

    def allowed_mask(self, free_open: bool = True) -> torch.Tensor:
        """Boolean mask over the vocabulary of tokens that keep the output a valid action prefix."""
        index, grammar, states = self.index, self.grammar, self.states
        mask = torch.zeros(index.size, dtype=torch.bool)
        if not states:
            mask[self.stop_ids] = True
            return mask
        if grammar.accepts(states):
            mask[self.stop_ids] = True
        room = grammar.free_room(states) if free_open else 0
        if room > 0:
            mask |= index.plain & (index.lengths <= room)
            for tok in index.special_ids:
                if grammar.advance(states, index.strings[tok], free_open):
                    mask[tok] = True
        literal = frozenset(st for st in states if grammar.next_chars([st]))
        if literal:
            self._walk(literal, "", mask, free_open)
        return mask

    def _walk(self, states: frozenset[State], prefix: str, mask: torch.Tensor, free_open: bool) -> None:
        """Depth-first over token-string prefixes that the literal states accept."""
        index, grammar = self.index, self.grammar
        for ch in grammar.next_chars(states):
            nxt = grammar.step_char(states, ch, free_open)
            if not nxt:
                continue
            text = prefix + ch
            lo, hi = index.prefix_range(text)
            if lo == hi:
                continue
            if index.sorted_strings[lo] == text:
                mask[index.sorted_ids[lo]] = True
            if grammar.free_room(nxt) > 0 and free_open:  # entered free text mid-token: check each longer token
                for j in range(lo, hi):
                    s = index.sorted_strings[j]
                    if len(s) > len(text) and grammar.advance(nxt, s[len(text) :], free_open):
                        mask[index.sorted_ids[j]] = True
            elif hi - lo > 1 or index.sorted_strings[lo] != text:
                self._walk(nxt, text, mask, free_open)
