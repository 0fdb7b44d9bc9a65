"""`confkv-agent generate`: one prompt, one policy, greedy; prints the text and a per-step cache summary."""

from __future__ import annotations

import json

import typer

from cli.options import POLICY_HELP, SET_HELP, checked_dtype, dtype_option


def _sparkline(values: list[float]) -> str:
    blocks = "▁▂▃▄▅▆▇█"
    if not values:
        return ""
    return "".join(blocks[min(int(v * len(blocks)), len(blocks) - 1)] for v in values)


def use_chat_template(model: str, tokenizer: object, chat: bool, raw: bool) -> bool:
    """Whether the prompt goes in as a user turn of the chat template.

    Instruct models answer a bare prompt with an immediate end-of-turn (empty text), so the template is the
    default for a named chat model (all but gemma3-270m) and for a model directory whose tokenizer has one;
    `--raw` sends the prompt as is, `--chat` insists on the template."""
    if chat and raw:
        raise ValueError("--chat and --raw contradict each other; pass one")
    if raw:
        return False
    if chat:
        return True
    from confkv.models import MODELS

    if model in MODELS:
        return MODELS[model].chat_template
    return bool(getattr(tokenizer, "chat_template", None))


def register(app: typer.Typer) -> None:
    @app.command("generate")
    def generate_cmd(
        prompt: str = typer.Argument(..., help="the prompt text"),
        model: str = typer.Option("smollm2-135m", "--model", help="registry name, HF directory or .gguf path"),
        policy: str = typer.Option("confkv", "--policy", help=POLICY_HELP),
        overrides: list[str] = typer.Option(None, "--set", help=SET_HELP),
        max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1),
        chat: bool = typer.Option(False, "--chat", help="wrap the prompt in the chat template (default for chat "
                                                        "models: every named model but gemma3-270m)"),
        raw: bool = typer.Option(False, "--raw", help="send the prompt as is, without the chat template"),
        ignore_eos: bool = typer.Option(False, "--ignore-eos", help="always generate max-new-tokens tokens"),
        check_plain: bool = typer.Option(False, "--check-plain", help="also run plain model.generate and compare"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
        dtype: str = dtype_option(),
    ) -> None:
        """Generate with a Conf-KV policy and show confidence, budget, kept tokens and KV bytes per step."""
        from rich.console import Console
        from rich.markup import escape

        from cli.policies import build_policies
        from confkv.generation import generate, plain_generate
        from confkv.models import load
        from traces.fmt import terminal_safe

        err = Console(stderr=True)
        if chat and raw:
            err.print("[red]error:[/] --chat and --raw contradict each other; pass one")
            raise typer.Exit(2)
        pol = build_policies([policy], overrides, model=model)[policy]
        try:
            mdl, tok = load(model, dtype=checked_dtype(dtype, model=model))
        except (FileNotFoundError, ValueError) as exc:
            err.print(f"[red]error:[/] {escape(terminal_safe(str(exc)))}")  # a model path is data
            raise typer.Exit(2) from exc
        try:
            chat = use_chat_template(model, tok, chat, raw)
        except ValueError as exc:
            err.print(f"[red]error:[/] {escape(terminal_safe(str(exc)))}")
            raise typer.Exit(2) from exc
        result = generate(mdl, tok, prompt, pol, max_new_tokens, chat=chat, ignore_eos=ignore_eos)
        payload = result.to_json()
        if check_plain:
            plain = plain_generate(mdl, tok, prompt, max_new_tokens, chat, ignore_eos)
            payload["plain_generate_equal"] = plain == result.token_ids
        if as_json:
            typer.echo(json.dumps(payload))
            return
        out = Console()
        out.print(result.text, markup=False, highlight=False)
        out.rule("cache")
        confs = [s["confidence"] for s in result.steps]
        out.print(f"confidence  {_sparkline(confs[-120:])}")
        budgets = {s["budget"] for s in result.steps}
        kept = [s["kept_tokens"] for s in result.steps]
        out.print(
            f"steps {len(result.steps)}  mean confidence {sum(confs) / max(len(confs), 1):.3f}  "
            f"budgets {sorted(b for b in budgets if b is not None) or 'none (full)'}  "
            f"kept tokens last/max {kept[-1] if kept else 0}/{max(kept) if kept else 0}"
        )
        ratio = payload["peak_kv_ratio_vs_full"]
        out.print(
            f"peak KV {result.peak_kv_bytes / 2**20:.2f} MiB vs full {result.full_kv_bytes / 2**20:.2f} MiB"
            + (f" ({ratio:.3f}x)" if ratio else "")
            + f"  prefill {result.prefill_s:.2f}s  decode {result.tokens_per_s:.1f} tok/s"
        )
        if check_plain:
            out.print(f"same tokens as plain model.generate: {payload['plain_generate_equal']}")
