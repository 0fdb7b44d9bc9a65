"""What the model reads: the system prompt for a small model, the per-step user message, and the append-only chat.

Why this shape: a 1.5B model given only the grammar emits prose, repeats its previous action and never answers.
It does better with one short example per verb, a handful of blunt rules ("exactly one action", "stop [answer] as
soon as the answer is on the page", "ids from the current page only") and a compact observation with the task
repeated next to it (the task sits far back in the context, and an evicting cache may have dropped it).

The conversation is append-only: the cache holds every token seen so far, so each turn must only ADD text. We
render the whole conversation with the tokenizer's chat template, check that the text already in the cache is an
unchanged prefix of it, and hand back only the new suffix to prefill. A template that rewrites earlier turns (e.g.
one that strips reasoning from old assistant messages) fails loudly instead of silently desynchronising the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.actions import ACTION_DOCS

if TYPE_CHECKING:
    from agent.observation import Observation

FEW_SHOT = """\
Examples (one per action; ids come from the page you are shown):
- Task: search for a blue mug. Page has `[5] searchbox 'Search products'` -> type [5] [blue mug] [1]
- Page has `[14] link 'My Orders'` and the task is about your orders -> click [14]
- A menu opens on mouse-over at `[8] button 'Categories'` -> hover [8]
- The field `[6] textbox 'Title'` holds old text you must remove -> clear [6]
- A dialog is open and must be closed -> press [Escape]
- The list continues below the visible part of the page -> scroll [down]
- You need another page of the site you know the address of -> goto [http://127.0.0.1:8001/orders]
- You opened the wrong page -> go_back
- Task: "What is the price of the Ironleaf mug?" Page shows `[22] StaticText '$9.95'` -> stop [$9.95]
- The task asked you to post a comment and it now shows on the page -> stop []
"""

RULES = """\
Rules:
1. Answer with exactly ONE action and nothing else: no explanation, no quotes, no code block.
2. Use only ids that appear in the CURRENT page below; ids change from page to page.
3. When the answer to the task is visible on the page, reply stop [answer] right away, with the answer text.
4. If an action failed, do not repeat it: try a different element or a different action.
"""

REASONING_RULE = (
    "Before the action, write ONE short sentence of reasoning on its own line, then a line `Action: <action>`.\n"
)


def system_prompt(reasoning: bool = False) -> str:
    """The grammar, one example per verb and the rules; `reasoning` asks for a one-line thought first."""
    rules = RULES.replace("and nothing else: no explanation", "; no other text") if reasoning else RULES
    return f"{ACTION_DOCS}\n{FEW_SHOT}\n{rules}" + (REASONING_RULE if reasoning else "")


def user_message(task_intent: str, observation: Observation, last_result: str | None, step: int) -> str:
    """One step's user turn: what happened last, the task (repeated: cheap, and it may have been evicted), the page."""
    parts = []
    if last_result:
        parts.append(f"Result of your last action: {last_result}")
    parts.append(f"Task: {task_intent}")
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
    messages: list[dict[str, str]] = field(default_factory=list)
    cached_text: str = ""

    def __post_init__(self) -> None:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; the agent needs an instruct (chat) model")
        self.messages = [{"role": "system", "content": self.system}]

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
