"""WebArena's early-stop rules as a small pure object the episode loop feeds after every model reply.

Why: small models loop (the same click forever) or lose the output format; WebArena ends such episodes after
3 parse failures in a row or 5 identical actions in a row, and every episode after a step limit. A parse failure
breaks a run of identical actions and a valid action breaks a run of parse failures, as in WebArena, where a
failed parse enters the history as a "none" action.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.actions import Action


@dataclass
class StopRules:
    max_steps: int = 30
    max_parse_failures: int = 3
    max_repeats: int = 5
    steps: int = 0
    parse_failures: int = 0  # consecutive
    repeats: int = 0  # length of the current run of identical actions
    _last: Action | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_parse_failures", "max_repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def record(self, action: Action | None) -> str | None:
        """Count one step: the parsed action, or None for a reply that did not parse. Returns the stop reason."""
        self.steps += 1
        if action is None:
            self.parse_failures += 1
            self.repeats, self._last = 0, None
        else:
            self.parse_failures = 0
            self.repeats = self.repeats + 1 if action == self._last else 1
            self._last = action
        return self.reason()

    def reason(self) -> str | None:
        """Why the episode must stop now, or None to continue."""
        if self.parse_failures >= self.max_parse_failures:
            return f"{self.parse_failures} consecutive replies without a valid action"
        if self.repeats >= self.max_repeats:
            return f"same action repeated {self.repeats} times in a row: {self._last.to_text()}"  # type: ignore[union-attr]
        if self.steps >= self.max_steps:
            return f"reached the maximum of {self.max_steps} steps"
        return None
