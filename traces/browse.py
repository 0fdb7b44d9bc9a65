"""`confkv-agent traces browse`: a terminal app to move through runs, episodes and steps of a trace database.

One widget per job: the episode table (with a filter line), the step list of the selected episode, the step pane
(observation, reply, action, result, error), one plot over the whole episode (confidence on the left axis, budget
and kept tokens on the right, step boundaries as vertical lines, gate openings as points) and, for pyramid
policies, a per-layer strip of kept tokens. `s` opens two episodes of the same task side by side, aligned by step.
Everything shown comes from `traces.browse_data` (pure, tested on its own); `replay` stays the plain printout.

Actions, answers, pages and errors are user data: they reach the screen as plain `Text` / `markup=False` widgets,
never as console markup (the agent's own grammar is `click [link 'Cart']`, and a stray `[/]` in a page crashed the
app), and through `traces.fmt.terminal_safe`, so control characters are shown, not obeyed.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static
from textual_plotext import PlotextPlot

from traces.browse_data import (
    EpisodeView,
    filter_episodes,
    load_episode,
    mean_confidence,
    outcome,
    partner,
    step_text,
)
from traces.episode_plot import align_by_step
from traces.fmt import terminal_safe
from traces.store import TraceStore


def _fmt_conf(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _cell(value: object) -> Text:
    """A table cell shown exactly as stored: DataTable parses plain `str` cells as console markup."""
    return Text(terminal_safe(str(value)), no_wrap=True)


class EpisodePlot(PlotextPlot):
    """Confidence, budget and kept tokens over the episode's tokens (prefill chunks and decoded tokens)."""

    def show(self, view: EpisodeView | None) -> None:
        plt = self.plt
        plt.clear_figure()
        if view is None or not len(view.series):
            plt.title("no prefill/decode records for this episode")
            self.refresh()
            return
        s = view.series
        plt.title(f"episode {view.episode['id']} · {view.episode['policy']} · {view.episode['task_id']}")
        plt.xlabel("tokens through the episode")
        plt.plot(s.x, s.confidence, label="confidence", marker="braille")
        budgets = [(x, b) for x, b in zip(s.x, s.budget, strict=True) if b is not None]
        if budgets:
            plt.plot([x for x, _ in budgets], [b for _, b in budgets], label="budget", yside="right", marker="braille")
        kept = [(x, k) for x, k in zip(s.x, s.kept, strict=True) if k is not None]
        if kept:
            plt.plot([x for x, _ in kept], [k for _, k in kept], label="kept", yside="right", marker="braille")
        for _, x in s.step_starts[1:]:
            plt.vline(x, "gray")
        if s.gate_openings:
            plt.scatter([x for x, _, _ in s.gate_openings], [after for _, _, after in s.gate_openings],
                        label="gate opens", yside="right", marker="▲")  # fmt: skip
        plt.ylim(0, 1)
        self.refresh()


class SideBySide(Screen):
    """Two episodes of one task, aligned by step; the highlighted step of each below."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]

    def __init__(self, left: EpisodeView, right: EpisodeView) -> None:
        super().__init__()
        self.left, self.right = left, right
        self.pairs = align_by_step(left.steps, right.steps)

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="aligned", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="panes"):
            with VerticalScroll():
                yield Static(id="left-step", markup=False)
            with VerticalScroll():
                yield Static(id="right-step", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        a, b = self.left.episode, self.right.episode
        self.title = f"{a['task_id']}: episode {a['id']} ({a['policy']}, {outcome(a)}) vs {b['id']} " \
                     f"({b['policy']}, {outcome(b)})"  # fmt: skip
        table = self.query_one("#aligned", DataTable)
        table.add_columns("step", f"{a['policy']} action", "conf", f"{b['policy']} action", "conf")
        for i, (sa, sb) in enumerate(self.pairs):
            step = (sa or sb)["step"]  # type: ignore[index]
            table.add_row(
                str(step),
                _cell((sa or {}).get("action") or ("-" if sa else "")),
                _fmt_conf(mean_confidence(self.left.series, step)) if sa else "",
                _cell((sb or {}).get("action") or ("-" if sb else "")),
                _fmt_conf(mean_confidence(self.right.series, step)) if sb else "",
                key=str(i),
            )
        table.focus()
        self._show(0)

    def _show(self, index: int) -> None:
        if not self.pairs:
            return
        sa, sb = self.pairs[index]
        self.query_one("#left-step", Static).update(step_text(sa, observation_lines=30))
        self.query_one("#right-step", Static).update(step_text(sb, observation_lines=30))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show(event.cursor_row)


class TraceBrowser(App):
    """Runs/episodes table -> step list -> step pane + episode plot; keys in the footer."""

    TITLE = "confkv-agent traces browse"
    CSS = """
    #top { height: 40%; }
    #episodes { width: 3fr; }
    #steps { width: 2fr; }
    #bottom { height: 1fr; }
    #detail-scroll { width: 2fr; border: round $secondary; }
    #right { width: 3fr; }
    #plot { height: 1fr; }
    #layers { height: auto; max-height: 12; }
    #filter { height: 3; }
    """
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("slash", "focus_filter", "Filter"),
        Binding("e", "focus_episodes", "Episodes"),
        Binding("t", "focus_steps", "Steps"),
        Binding("m", "mark", "Mark for compare"),
        Binding("s", "side_by_side", "Side by side"),
    ]

    def __init__(self, db: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.store = TraceStore.open_existing(db)
        self.all_episodes = self.store.episodes()
        self.shown: list[Any] = list(self.all_episodes)
        self.view: EpisodeView | None = None
        self.marked: int | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter: task:shop policy:confkv outcome:failure (bare words match the task)",
                    id="filter")  # fmt: skip
        with Horizontal(id="top"):
            yield DataTable(id="episodes", cursor_type="row", zebra_stripes=True)
            yield DataTable(id="steps", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="bottom"):
            with VerticalScroll(id="detail-scroll"):
                yield Static(id="detail", markup=False)
            with Vertical(id="right"):
                yield EpisodePlot(id="plot")
                yield Static(id="layers", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#episodes", DataTable).add_columns("id", "run", "policy", "task", "outcome", "steps")
        self.query_one("#steps", DataTable).add_columns("step", "action", "conf", "error")
        self._fill_episodes()
        self.query_one("#episodes", DataTable).focus()

    def on_unmount(self) -> None:
        self.store.close()

    # ------------------------------------------------------------ episodes

    def _fill_episodes(self) -> None:
        table = self.query_one("#episodes", DataTable)
        table.clear()
        for ep in self.shown:
            mark = "*" if ep["id"] == self.marked else ""
            table.add_row(f"{ep['id']}{mark}", str(ep["run_id"]), _cell(ep["policy"]), _cell(ep["task_id"]),
                          outcome(ep), "-" if ep["steps"] is None else str(ep["steps"]), key=str(ep["id"]))  # fmt: skip
        if self.shown:
            self._select_episode(int(self.shown[0]["id"]))
        else:
            self._select_episode(None)

    def on_input_changed(self, event: Input.Changed) -> None:
        try:
            self.shown = filter_episodes(self.all_episodes, event.value)
        except ValueError as exc:
            self.notify(terminal_safe(str(exc)), severity="warning", markup=False)  # it quotes what was typed
            return
        self._fill_episodes()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#episodes", DataTable).focus()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is None:
            return
        if event.data_table.id == "episodes":
            self._select_episode(int(event.row_key.value))
        elif event.data_table.id == "steps":
            self._select_step(int(event.row_key.value))

    def _select_episode(self, episode_id: int | None) -> None:
        if self.view is not None and episode_id == self.view.episode["id"]:
            return
        self.view = None if episode_id is None else load_episode(self.store, episode_id)
        steps = self.query_one("#steps", DataTable)
        steps.clear()
        if self.view is not None:
            for s in self.view.steps:
                conf = mean_confidence(self.view.series, s["step"])
                steps.add_row(str(s["step"]), _cell(s["action"] or "-"), _fmt_conf(conf),
                              _cell((s["parse_error"] or s["exec_error"] or "")[:40]), key=str(s["step"]))  # fmt: skip
        self.query_one("#plot", EpisodePlot).show(self.view)
        self._show_layers()
        first = self.view.steps[0]["step"] if self.view and self.view.steps else None
        self._select_step(first)

    def _select_step(self, step: int | None) -> None:
        detail = self.query_one("#detail", Static)
        if self.view is None:
            detail.update("no episode selected")
            return
        row = next((s for s in self.view.steps if s["step"] == step), None)
        ep = self.view.episode
        head = f"episode {ep['id']} · {ep['policy']} · {ep['task_id']} · {outcome(ep)}\n" \
               f"{ep.get('eval_reason') or ep.get('error') or ''}\n\n"  # fmt: skip
        detail.update(terminal_safe(head) + (step_text(row) if row else "(no steps recorded)"))

    def _show_layers(self) -> None:
        layers = self.query_one("#layers", Static)
        if self.view is None or not self.view.layers:
            layers.display = False
            layers.update("")
            return
        layers.display = True
        lines = ["kept tokens per layer (one column per step)"]
        lines += [f"L{layer:02d} {strip} {last}" for layer, strip, last in self.view.layers]
        layers.update("\n".join(lines))

    # ------------------------------------------------------------ actions

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_focus_episodes(self) -> None:
        self.query_one("#episodes", DataTable).focus()

    def action_focus_steps(self) -> None:
        self.query_one("#steps", DataTable).focus()

    def action_mark(self) -> None:
        if self.view is None:
            return
        self.marked = int(self.view.episode["id"])
        self.notify(f"episode {self.marked} marked: `s` on another episode of the same task compares them",
                    markup=False)  # fmt: skip

    def action_side_by_side(self) -> None:
        if self.view is None:
            self.notify("no episode selected", severity="warning")
            return
        other = partner(self.all_episodes, self.view.episode, self.marked)
        if other is None:
            self.notify(terminal_safe(f"no other episode of task {self.view.episode['task_id']} to compare with"),
                        severity="warning", markup=False)  # fmt: skip
            return
        self.push_screen(SideBySide(self.view, load_episode(self.store, int(other["id"]))))
