"""What the model reads: the system prompt for a small model, the per-step user message, and the append-only chat.

Why this shape: a 1.5B model given only the grammar emits prose, repeats its previous action and never answers;
given one example per verb and "stop as soon as the answer is on the page" it answered on the first page every
time (guessing). So the examples are whole short trajectories that search, open and read before they stop, the
rules say the first page rarely holds the answer, and every turn lists the agent's own previous actions with their
results next to the task (the task and older turns sit far back in the context, and an evicting cache may have
dropped them).

The conversation is append-only: the cache holds every token seen so far, so each turn must only ADD text. We
render the whole conversation with the tokenizer's chat template, check that the text already in the cache is an
unchanged prefix of it, and hand back only the new suffix to prefill. A template that rewrites earlier turns (e.g.
one that strips reasoning from old assistant messages) fails loudly instead of silently desynchronising the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.actions import ACTION_DOCS, LABEL_ACTION_DOCS
from agent.targets import to_labels

if TYPE_CHECKING:
    from agent.observation import Observation

# Three short trajectories on made-up sites (none of their names, prices or answers exist on our sites or in
# tasks/; tests/agent/test_prompt_leaks.py enforces it). They show what a small model skips when given one example
# per verb: the start page rarely holds the answer, so search or follow links first; check the page you land on;
# keep facts from earlier pages and come back with go_back.
FEW_SHOT = """\
Example 1, a plant nursery site. Task: What pot size does the Velvet Fern come in?
  Step 1, page has `[4] searchbox 'Search plants'` -> type [4] [Velvet Fern] [1]
  Step 2, results show `[21] link 'Velvet Fern'` and `[22] link 'Velvet Fern Starter Kit'` -> click [21]
  Step 3, the plant's page shows `StaticText 'Pot size: 14 cm'` -> stop [14 cm]
Example 2, a club noticeboard. Task: Reply "Count me in" to the notice "Lantern walk on Friday".
  Step 1, page lists `[7] link 'Lantern walk on Friday'` -> click [7]
  Step 2, page has `[15] textbox 'Your reply'` and `[16] button 'Send reply'` -> type [15] [Count me in] [0]
  Step 3 -> click [16]
  Step 4, your reply now shows under the notice -> stop []
Example 3, a hardware store. Task: Which is cheaper, the Brass Kettle or the Copper Kettle?
  Step 1 -> type [3] [kettle] [1]
  Step 2 -> click [12]  (the Brass Kettle page says 'Price: $31.40')
  Step 3 -> go_back
  Step 4 -> click [13]  (the Copper Kettle page says 'Price: $27.15')
  Step 5 -> stop [Copper Kettle]
"""

# The elements FEW_SHOT's actions name, for its label form (`agent.targets`).
FEW_SHOT_LABELS = {
    4: "searchbox 'Search plants'", 21: "link 'Velvet Fern'", 7: "link 'Lantern walk on Friday'",
    15: "textbox 'Your reply'", 16: "button 'Send reply'", 3: "searchbox 'Search'", 12: "link 'Brass Kettle'",
    13: "link 'Copper Kettle'",
}  # fmt: skip

RULES = """\
Rules:
1. Answer with exactly ONE action and nothing else: no explanation, no quotes, no code block.
2. Use only ids that appear in the CURRENT page below; ids change from page to page.
3. The first page rarely shows the answer. Search, or open the link of the item the task names, and read that
   page. Reply stop [answer] only when the answer is written on the current page or on a page you already read.
4. If an action failed or the page did not change, do not repeat it: try another element or another action.
5. Reply stop [N/A] only after you have looked and the task cannot be done on these sites.
"""

LABEL_RULE_2 = "2. Name only elements of the CURRENT page below, by role and name as shown there.\n"

REASONING_RULE = (
    "Before the action, write ONE short sentence of reasoning on its own line, then a line `Action: <action>`.\n"
)
MAX_HISTORY = 12  # previous actions listed in each turn (the oldest are summarised as a count)

# One whole demonstration episode as real chat turns (user page -> assistant action), after the system prompt, on
# the made-up nursery site of example 1. Why: with the examples only as prose in the system prompt, the 1.5B agent's
# first choice on a results page was `type` (p ~0.47 against click ~0.17 and stop ~0.03, three sampled states),
# so it typed prices into filter fields until the step limit on every sampled task; with these turns in front it
# clicked the result on all four states probed (a prompt probe, docs/results/agent-v7-labels.md). The pages are rendered by the same
# `user_message` as the live turns, so the format the model continues is exactly the one it sees.
_DEMO_SITE = "http://127.0.0.1:9000"


@dataclass(frozen=True)
class Demo:
    """One demonstration episode: its task and pages as (title, path, tree, thought, action)."""

    intent: str
    pages: tuple[tuple[str, str, str, str, str], ...]


SEARCH_DEMO = Demo("What pot size does the Velvet Fern come in?", (
    ("Green Corner Nursery", "/",
     "[1] link 'Green Corner'\n[2] search\n  [3] searchbox 'Search plants'\n  [4] button 'Search'\n"
     "[5] navigation 'Plants'\n  [6] link 'Ferns'\n  [7] link 'Cacti'\n[8] main\n  [9] heading 'Welcome to Green Corner'",
     "The page has a search box: search for the plant.", "type [3] [Velvet Fern] [1]"),
    ("Search: Velvet Fern", "/search?q=Velvet+Fern",
     "[1] link 'Green Corner'\n[2] search\n  [3] searchbox 'Search plants' value='Velvet Fern'\n  [4] button 'Search'\n"
     "[8] main\n  [10] form 'Filter'\n    [11] textbox 'Minimum price'\n    [12] textbox 'Maximum price'\n"
     "    [13] button 'Apply filters'\n  [14] StaticText '2 plants found.'\n  [15] link 'Velvet Fern'\n"
     "  [16] StaticText '$12.50'\n  [17] link 'Velvet Fern Starter Kit'\n  [18] StaticText '$19.00'",
     "The pot size is not here; open the plant's own page.", "click [15]"),
    ("Velvet Fern", "/plant/velvet-fern",
     "[1] link 'Green Corner'\n[2] search\n  [3] searchbox 'Search plants'\n  [4] button 'Search'\n[8] main\n"
     "  [20] heading 'Velvet Fern'\n  [21] StaticText 'Price: $12.50'\n  [22] StaticText 'Pot size: 14 cm'\n"
     "  [23] spinbutton 'Quantity' value='1'\n  [24] button 'Add to cart'",
     "The page says the pot size: 14 cm.", "stop [14 cm]"),
))  # fmt: skip

# "Most / highest / cheapest in a section": open the section, sort it, read the first row (a list's first page
# rarely holds the extreme of all its pages). On a made-up recipe board, leak-tested like the rest.
_BOARD = ("[1] link 'Spoonful'\n[2] search\n  [3] searchbox 'Search recipes'\n  [4] button 'Search'\n"
          "[5] navigation 'Sections'\n  [6] link 'Stews'\n  [7] link 'Flatbreads'\n  [8] link 'Pickles'\n[9] main\n")
_ROWS = ("  [12] navigation 'Sort'\n    [13] StaticText 'Sort by:'\n    [14] link 'Newest'\n    [15] link 'Most votes'\n"
         "    [16] link 'Title'\n  [17] StaticText 'Showing 1-2 of 31 recipes'\n")
SORT_DEMO = Demo("Which recipe in the Stews section has the most votes?", (
    ("Spoonful recipe board", "/",
     _BOARD + "  [10] heading 'Newest recipes'\n  [11] link 'Quince and lentil stew'\n  [12] StaticText '4 votes'",
     "The task is about the Stews section: open it.", "click [6]"),
    ("Stews", "/section/stews",
     _BOARD + "  [10] heading 'Stews'\n" + _ROWS + "  [18] link 'Smoky turnip stew'\n  [19] StaticText '17 votes'\n"
     "  [20] link 'Barley and leek stew'\n  [21] StaticText '9 votes'\n  [22] link 'Next page'",
     "This page shows 2 of 31 recipes: sort by votes instead of reading every page.", "click [15]"),
    ("Stews", "/section/stews?sort=votes",
     _BOARD + "  [10] heading 'Stews'\n" + _ROWS + "  [18] link 'Juniper bean stew'\n  [19] StaticText '212 votes'\n"
     "  [20] link 'Smoky turnip stew'\n  [21] StaticText '17 votes'\n  [22] link 'Next page'",
     "Sorted by votes, the first recipe has the most.", "stop [Juniper bean stew]"),
))  # fmt: skip

#: The demonstrations in front of every episode, in order (the search episode last: the commonest first move).
DEMOS = (SORT_DEMO, SEARCH_DEMO)


def demo_turns(reasoning: bool = False, labels: bool = True, demos: tuple[Demo, ...] = DEMOS) -> list[dict[str, str]]:
    """The demonstration episodes as chat messages (user, assistant, ...); with `reasoning` each reply carries its
    one-line thought, in the format the grammar asks for; with `labels` actions name elements by label."""
    from agent.observation import Observation

    messages: list[dict[str, str]] = []
    for demo in demos:
        history: list[str] = []
        for step, (title, path, tree, thought, action) in enumerate(demo.pages):
            page = Observation.from_text(tree, _DEMO_SITE + path, title)
            action = to_labels(action, page.labels()) if labels else action  # named on the page as written
            last = history[-1] if history else None
            messages.append({"role": "user", "content": user_message(demo.intent, page, last, step, history)})
            messages.append({"role": "assistant", "content": f"{thought}\nAction: {action}" if reasoning else action})
            history.append(f"OK: {action}")
    return messages


def system_prompt(reasoning: bool = False, labels: bool = True) -> str:
    """The grammar, one example per verb and the rules; `reasoning` asks for a one-line thought first; `labels`
    names elements by label (`click [link 'Cart']`, `agent.targets`) instead of by id."""
    rules = RULES.replace("and nothing else: no explanation", "; no other text") if reasoning else RULES
    docs, examples = ACTION_DOCS, FEW_SHOT
    if labels:
        docs, examples = LABEL_ACTION_DOCS, to_labels(FEW_SHOT, FEW_SHOT_LABELS)
        rules = "\n".join(LABEL_RULE_2.rstrip() if line.startswith("2. ") else line for line in rules.splitlines()) + "\n"
    return f"{docs}\n{examples}\n{rules}" + (REASONING_RULE if reasoning else "")


def user_message(task_intent: str, observation: Observation, last_result: str | None, step: int,
                 history: list[str] | None = None) -> str:
    """One step's user turn: the task (repeated: cheap, and it may have been evicted), the agent's own previous
    actions with their results (a compact list: the full earlier turns may be evicted), then the page."""
    parts = [f"Task: {task_intent}"]
    done = list(history or [])
    if done:
        shown = done[-MAX_HISTORY:]
        first = len(done) - len(shown) + 1
        lines = [f"{first + i}. {h}" for i, h in enumerate(shown)]
        skipped = f" ({first - 1} earlier ones not shown)" if first > 1 else ""
        parts.append("Your previous actions" + skipped + ":\n" + "\n".join(lines))
    elif last_result:
        parts.append(f"Result of your last action: {last_result}")
    parts.append(f"Step {step + 1}. Current page:\n{observation.render()}")
    parts.append("Your next action:")
    return "\n".join(parts)


class TemplateDriftError(RuntimeError):
    """The chat template rendered earlier turns differently than what is already in the cache."""


@dataclass
class ChatConversation:
    """An append-only chat rendered with the tokenizer's chat template.

    `cached_text` is the text whose tokens the live cache already holds. `user_turn` returns the new text to append
    (closing the previous assistant turn, the user message and the assistant header); `assistant_reply` records the
    text the model generated into the cache.
    """

    tokenizer: Any
    system: str
    demos: list[dict[str, str]] = field(default_factory=list)  # demonstration turns after the system prompt
    messages: list[dict[str, str]] = field(default_factory=list)
    cached_text: str = ""

    def __post_init__(self) -> None:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; the agent needs an instruct (chat) model")
        self.messages = [{"role": "system", "content": self.system}, *self.demos]

    def render(self, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            self.messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def user_turn(self, content: str) -> str:
        """Add a user message; return the text (suffix) that must be appended to the cache before decoding."""
        if self.messages[-1]["role"] == "user":
            raise ValueError("two user turns in a row: record the assistant reply first")
        self.messages.append({"role": "user", "content": content})
        rendered = self.render(add_generation_prompt=True)
        if not rendered.startswith(self.cached_text):
            raise TemplateDriftError(
                "the chat template changed text that is already in the cache; cannot append only the new turn "
                f"(cached text ends {self.cached_text[-80:]!r}, rendered text there is "
                f"{rendered[max(0, len(self.cached_text) - 80):len(self.cached_text)]!r})"
            )
        suffix = rendered[len(self.cached_text) :]
        self.cached_text = rendered
        return suffix

    def assistant_reply(self, text: str) -> None:
        """Record the generated reply (exactly the text the cache received, stop token excluded)."""
        if self.messages[-1]["role"] != "user":
            raise ValueError("an assistant reply must follow a user turn")
        self.messages.append({"role": "assistant", "content": text})
        self.cached_text += text
