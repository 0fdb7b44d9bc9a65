"""`confkv-agent bench ...`: a thin registration layer; each benchmark's logic lives in `confkv.bench.<name>`."""

from __future__ import annotations

import json

import typer

from cli.options import checked_dtype, dtype_option

bench = typer.Typer(help="Benchmarks: decode attention kernel, decode speed, memory, quality.", no_args_is_help=True)

CPU_DEFAULT_LENGTHS = "512,1024,2048"
GPU_DEFAULT_LENGTHS = "1024,2048,4096,8192,16384,32768"


def _label(model: str) -> str:
    """A model name fit for a file name: a registry name as it is, a directory or .gguf path by its last part."""
    from pathlib import Path

    return Path(model).stem if model.endswith(".gguf") else Path(model).name


def _save(report: dict, out: str, name: str):
    """Write a benchmark's JSON report under `out`; returns its path."""
    from pathlib import Path

    path = Path(out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    return path


def _parse_lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise typer.BadParameter(f"--lengths must be comma-separated integers, got {text!r}") from exc
    if not lengths or min(lengths) < 1:
        raise typer.BadParameter(f"--lengths must be positive integers, got {text!r}")
    return lengths


@bench.command("kernel")
def kernel(
    lengths: str = typer.Option(None, help=f"context lengths, comma-separated [GPU: {GPU_DEFAULT_LENGTHS}; CPU: "
                                           f"{CPU_DEFAULT_LENGTHS}]"),
    batch: int = typer.Option(1, min=1),
    heads: int = typer.Option(32, min=1, help="query heads"),
    kv_heads: int = typer.Option(8, min=1),
    head_dim: int = typer.Option(128, min=1),
    recent: int = typer.Option(128, min=0, help="tokens kept in the model dtype in the INT8 variant"),
    iters: int = typer.Option(20, min=1),
    compile_: bool = typer.Option(False, "--compile", help="also time torch.compile of the INT8+mass call (slow to build)"),
    as_json: bool = typer.Option(False, "--json", help="print the full report as JSON"),
) -> None:
    """Decode attention (q_len=1): our kernel vs SDPA over an equal full cache, INT8 on/off, mass on/off."""
    import torch

    from confkv.bench.kernel import KernelBenchConfig, format_report, run_kernel_bench

    on_gpu = torch.cuda.is_available()
    cfg = KernelBenchConfig(
        lengths=_parse_lengths(lengths or (GPU_DEFAULT_LENGTHS if on_gpu else CPU_DEFAULT_LENGTHS)),
        batch=batch, heads=heads, kv_heads=kv_heads, head_dim=head_dim, recent=recent, iters=iters, compile=compile_,
    )
    try:
        report = run_kernel_bench(cfg)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    for line in format_report(report):
        typer.echo(line)


@bench.command("actions")
def actions(
    model: str = typer.Option("qwen2.5-coder-1.5b", "--model", help="registry name, HF directory or .gguf"),
    modes: str = typer.Option("free,constrained", "--modes", help="comma-separated: free, constrained"),
    precisions: str = typer.Option("fp32,int8", "--precisions", help="comma-separated: fp32, bf16, int8 (dynamic)"),
    limit: int = typer.Option(None, "--limit", min=1, help="only the first N of the 12 cases"),
    as_json: bool = typer.Option(False, "--json", help="print the full report as JSON"),
) -> None:
    """Single-step action accuracy on 12 real site states: free vs constrained decoding, fp32 vs INT8."""
    from runner.bench_actions import format_report, run_bench

    mode_list = [m.strip() for m in modes.split(",") if m.strip()]
    prec_list = [p.strip() for p in precisions.split(",") if p.strip()]
    if not mode_list or set(mode_list) - {"free", "constrained"}:
        raise typer.BadParameter(f"--modes must be free and/or constrained, got {modes!r}")
    if not prec_list or set(prec_list) - {"fp32", "bf16", "int8"}:
        raise typer.BadParameter(f"--precisions must be among fp32, bf16, int8, got {precisions!r}")
    report = run_bench(model, mode_list, prec_list, limit, progress=lambda m: typer.echo(m, err=True))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    for line in format_report(report):
        typer.echo(line)


def _quality_output(result: dict, paths: list, table, as_json: bool) -> None:
    """Shared tail of the quality benches (ppl, niah, klshift, memory): JSON on stdout or a rich table."""
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=float))
        return
    from rich.console import Console

    console = Console()
    console.print(table(result))
    for path in paths:
        console.print(f"wrote {path}")


def _names(text: str | None) -> tuple[str, ...] | None:
    return tuple(p.strip() for p in text.split(",") if p.strip()) if text else None


def _overrides(items: list[str] | None) -> dict[str, str]:
    from confkv.policies import PolicyError, parse_overrides

    try:
        return parse_overrides(items)
    except PolicyError as exc:
        raise typer.BadParameter(str(exc)) from exc


@bench.command("ppl")
def ppl(
    model: str = typer.Option("smollm2-135m", "--model", help="registry name or HF directory"),
    quick: bool = typer.Option(False, "--quick", help="CPU grid: 1K tokens, stride 16, ~8x compression"),
    tokens: int = typer.Option(None, "--tokens", min=8, help="text length [4096 or the model limit; quick 1024]"),
    stride: int = typer.Option(None, "--stride", min=1, help="tokens per call, eviction after each [1; quick 16]"),
    set_: list[str] = typer.Option(None, "--set", help="override of the gated policies, key=value"),
    dtype: str = dtype_option(),
    int8: bool = typer.Option(False, "--int8", help="the same as --dtype int8 (W8A8 Linear layers, fp32 activations)"),
    policies: str = typer.Option(None, "--policies", help="comma-separated subset [all: the policies of roles main, "
                                 "ablation-reference and ablation in `confkv-agent policies`]"),
    out: str = typer.Option("results", "--out", help="results directory"),
    as_json: bool = typer.Option(False, "--json", help="print the results JSON"),
) -> None:
    """StreamingLLM long-text perplexity, every policy at a matched footprint, the matched-rate ablation."""
    from confkv.bench import ppl as bench_ppl
    from confkv.bench.common import CorpusMissingError

    try:
        result, paths = bench_ppl.run(model, quick, out, tokens, stride, _overrides(set_),
                                      progress=lambda m: typer.echo(m, err=True), dtype=checked_dtype(dtype, model=model),
                                      int8=int8, policies=_names(policies))
    except (CorpusMissingError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    _quality_output(result, paths, bench_ppl.table, as_json)


@bench.command("decode")
def decode(
    model: str = typer.Option("smollm2-135m", "--model"),
    contexts: str = typer.Option("512,1024,2048,4096,8192", help="context lengths, comma-separated"),
    steps: int = typer.Option(16, min=1, help="decode steps timed per run"),
    repeats: int = typer.Option(3, min=1, help="interleaved repeats (median reported)"),
    quick: bool = typer.Option(False, "--quick", help="contexts 512,2048,4096 and 2 repeats"),
    overrides: list[str] = typer.Option(None, "--set", help="confkv policy override key=value"),
    dtype: str = dtype_option(),
    dtypes: str = typer.Option(None, "--dtypes", help="several dtypes in one run, comma-separated (e.g. "
                               "fp32,bf16): one table, a JSON per dtype; overrides --dtype"),
    out: str = typer.Option("results", "--out", help="directory for the results JSON"),
    as_json: bool = typer.Option(False, "--json", help="print the report (a list of them with --dtypes)"),
) -> None:
    """Decode ms/step after N context tokens: plain DynamicCache vs our `full` vs `confkv`, interleaved; and
    prefill tokens/s of `full` and `confkv`. Ratios are within one dtype."""

    from rich.console import Console
    from rich.table import Table

    from confkv.bench.decode import run_decode_bench, speedups
    from confkv.models import load
    from confkv.policies import parse_overrides

    ctx = _parse_lengths("512,2048,4096" if quick else contexts)
    names = [checked_dtype(d.strip(), model=model) for d in (dtypes.split(",") if dtypes else [dtype]) if d.strip()]
    if not names:
        raise typer.BadParameter(f"expected comma-separated dtypes, got {dtypes!r}", param_hint="--dtypes")
    policy_overrides = parse_overrides(overrides)
    reports, paths = [], []
    for name in dict.fromkeys(names):
        mdl, _ = load(model, dtype=name)
        report = run_decode_bench(mdl, mdl.config.vocab_size, list(ctx), steps, 2 if quick else repeats,
                                  policy_overrides)
        report["model"], report["dtype"] = model, name
        reports.append(report)
        paths.append(_save(report, out, f"decode_{_label(model)}" + (f"_{name}" if dtypes else "") + ".json"))
        del mdl
    if as_json:
        typer.echo(json.dumps(reports if dtypes else reports[0]))
        return
    table = Table(title=f"decode ms/step, {model}, {reports[0]['threads']} threads, median of {reports[0]['repeats']}")
    for col in ("dtype", "context", "variant", "ms/step", "vs plain", "bookkeeping", "kept tokens", "KV MiB",
                "prefill tok/s", "gate open"):
        table.add_column(col, justify="right")
    for report in reports:
        ups = speedups(report)
        for r in report["rows"]:
            share = "" if r["bookkeeping_share"] is None else f"{100 * r['bookkeeping_share']:.1f}%"
            pre = "" if not r.get("prefill_tokens_per_s") else f"{r['prefill_tokens_per_s']:.0f}"
            gate = "" if r.get("gate_open_rate") is None else f"{100 * r['gate_open_rate']:.0f}%"
            table.add_row(report["dtype"], str(r["context"]), r["variant"], f"{r['ms_per_step']:.1f}",
                          f"{ups[r['context']][r['variant']]:.2f}x", share, str(r["kept_tokens"]),
                          f"{r['kv_bytes'] / 2**20:.1f}", pre, gate)
    Console().print(table)
    for path in paths:
        typer.echo(f"results: {path}")


def _floats(text: str | None, name: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise typer.BadParameter(f"{name} must be comma-separated numbers, got {text!r}") from exc


@bench.command("niah")
def niah(
    model: str = typer.Option("smollm2-135m", "--model", help="registry name or HF directory"),
    quick: bool = typer.Option(False, "--quick", help="CPU grid: 512/1024 tokens x depths 0/50/100%"),
    lengths: str = typer.Option(None, "--lengths", help="context lengths [1K..32K up to the model limit]"),
    depths: str = typer.Option(None, "--depths", help="needle depths in [0,1] [0,.25,.5,.75,1]"),
    needles: int = typer.Option(3, "--needles", min=1, help="trials per cell, each with its own passcode"),
    policies: str = typer.Option(None, "--policies", help="comma-separated subset (the fixed baselines need the "
                                 "--match policy) [role main in `confkv-agent policies`; on request: role on-request]"),
    match: str = typer.Option("confkv", "--match", help="the gated policy the fixed baselines are byte-matched to"),
    match_total: bool = typer.Option(False, "--match-total", help="match resident + cold-tier bytes (one device)"),
    set_: list[str] = typer.Option(None, "--set", help="override of the gated policies, key=value"),
    dtype: str = dtype_option(),
    int8: bool = typer.Option(False, "--int8", help="the same as --dtype int8 (W8A8 Linear layers, fp32 activations)"),
    out: str = typer.Option("results", "--out", help="results directory"),
    as_json: bool = typer.Option(False, "--json", help="print the results JSON"),
) -> None:
    """Needle in a haystack: accuracy per policy at matched footprint, heatmap and a confidence/budget trace."""
    from confkv.bench import niah as bench_niah
    from confkv.bench.common import CorpusMissingError

    lens = _parse_lengths(lengths) if lengths else None
    try:
        chosen = _names(policies) or bench_niah.POLICIES
        result, paths = bench_niah.run(model, quick, out, lens, _floats(depths, "--depths"), _overrides(set_),
                                       progress=lambda m: typer.echo(m, err=True), dtype=checked_dtype(dtype, model=model),
                                       needles=needles, policies=chosen, int8=int8, match=match,
                                       match_total=match_total)
    except (CorpusMissingError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    _quality_output(result, paths, bench_niah.table, as_json)


@bench.command("klshift")
def klshift(
    model: str = typer.Option("smollm2-135m", "--model", help="registry name or HF directory"),
    quick: bool = typer.Option(False, "--quick", help="CPU: 1K tokens, 48 positions"),
    positions: int = typer.Option(None, "--positions", min=4, help="sampled positions [128; quick 48]"),
    ablate: int = typer.Option(256, "--ablate", min=1, help="preceding tokens removed from the context"),
    dtype: str = dtype_option(),
    out: str = typer.Option("results", "--out", help="results directory"),
    as_json: bool = typer.Option(False, "--json", help="print the results JSON"),
) -> None:
    """Pearson r (95% CIs) between confidence and the KL shift from ablating the preceding 256 tokens."""
    from confkv.bench import klshift as bench_kl
    from confkv.bench.common import CorpusMissingError

    try:
        result, paths = bench_kl.run(model, quick, out, positions, ablate, progress=lambda m: typer.echo(m, err=True),
                                     dtype=checked_dtype(dtype, model=model))
    except (CorpusMissingError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    _quality_output(result, paths, bench_kl.table, as_json)


@bench.command("memory")
def memory(
    config: str = typer.Option("qwen2.5-32b", "--config", help="KV geometry (see confkv.bench.memory.CONFIGS)"),
    tokens: int = typer.Option(4096, "--tokens", min=1, help="generated tokens N"),
    trajectory: str = typer.Option(None, "--trajectory", help="bench ppl JSON with confkv's budget trajectory "
                                                             "[results/ppl-<model>.json]"),
    model: str = typer.Option("smollm2-135m", "--model", help="model whose run gives the gate trajectory"),
    quick: bool = typer.Option(False, "--quick", help="short generation (64 tokens) when no ppl JSON exists"),
    gen_tokens: int = typer.Option(256, "--gen-tokens", min=1, help="generation length when no ppl JSON exists"),
    n_low: int = typer.Option(256, "--n-low", min=1),
    n_high: int = typer.Option(512, "--n-high", min=1),
    int8_after: int = typer.Option(64, "--int8-after", min=0, help="model-dtype window (0 = INT8 off)"),
    out: str = typer.Option("results", "--out", help="results directory"),
    as_json: bool = typer.Option(False, "--json", help="print the results JSON"),
) -> None:
    """KV bytes of a model config at N tokens: full vs the budget trajectory of a real run, vs 15.8 -> 2.6 GB."""
    from pathlib import Path

    from confkv.bench import memory as bench_mem
    from confkv.bench.common import results_path

    source = Path(trajectory) if trajectory else results_path(out, "ppl", model)
    if trajectory and not source.exists():
        raise typer.BadParameter(f"--trajectory {trajectory}: no such file")
    try:
        result, paths = bench_mem.run(config, tokens, source, model, 64 if quick else gen_tokens, out,
                                      n_low, n_high, int8_after or None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    _quality_output(result, paths, bench_mem.table, as_json)


_DTYPE_INTENTS = ("What colour options does the Harbor Lamp come in?", "Open the newest notice and reply 'Thanks'.",
                  "How many reviews does the second result have?", "Find the cheapest kettle and answer its price.")


def _agent_prompts(tokenizer, n: int, tokens: int) -> tuple[list[int], list[list[int]]]:
    """Agent-shaped prompts: (the real system prompt and demonstration, as the agent prefills them once), and per
    prompt a first-step user turn with a synthetic page, shortened until it fits in `tokens`."""
    from agent.observation import Observation
    from agent.prompt import ChatConversation, demo_turns, system_prompt, user_message

    system, demos = system_prompt(), demo_turns()
    head = ChatConversation(tokenizer, system, demos).render(add_generation_prompt=False)
    prompts = []
    for i in range(n):
        items = tokens // 4
        while True:
            page = "\n".join(f"[{k}] link 'Item {k} of aisle {i}' StaticText '${3 + k % 40}.{k % 100:02d}'"
                             for k in range(10, 10 + items))  # fmt: skip
            obs = Observation(text=page, url=f"http://127.0.0.1:9999/aisle/{i}", title="Aisle", tabs=["Aisle"],
                              active_tab=0)
            chat = ChatConversation(tokenizer, system, demos, cached_text=head)  # as the agent's fork starts
            text = chat.user_turn(user_message(_DTYPE_INTENTS[i % len(_DTYPE_INTENTS)], obs, None, 0))
            ids = tokenizer(text, add_special_tokens=False).input_ids
            if len(ids) <= tokens or items <= 1:
                break
            items = max(1, items * tokens // len(ids) - 1)
        prompts.append(ids)
    return tokenizer(head, add_special_tokens=False).input_ids, prompts


@bench.command("dtype")
def dtype_bench(
    model: str = typer.Option("qwen2.5-coder-1.5b", "--model", help="registry name or HF directory"),
    dtypes: str = typer.Option("fp32,bf16", "--dtypes", help="comma-separated, the first is the reference"),
    prompts: int = typer.Option(4, "--prompts", min=1, help="agent-shaped prompts (interleaved across dtypes)"),
    prompt_tokens: int = typer.Option(1024, "--prompt-tokens", min=16,
                                      help="tokens per step prompt (after the shared system prompt + demo)"),
    decode: int = typer.Option(16, "--decode", min=2, help="greedy tokens per prompt"),
    out: str = typer.Option("results", "--out", help="directory for the results JSON"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """fp32 vs bf16 (etc.) on agent-shaped steps in one run: prefill tok/s, decode ms/token, step time, greedy."""

    from confkv.bench.dtype import format_report, run_dtype_bench
    from confkv.models import load
    from confkv.models.load import load_tokenizer

    names = [checked_dtype(d.strip(), announce=d.strip() == "auto", model=model) for d in dtypes.split(",")
             if d.strip()]  # fmt: skip
    tokenizer = load_tokenizer(model)  # the weights are loaded once per dtype below, not for the tokenizer
    head, steps = _agent_prompts(tokenizer, prompts, prompt_tokens)
    report = run_dtype_bench(lambda d: load(model, dtype=d)[0], names, steps, decode,
                             progress=lambda m: typer.echo(m, err=True), prefix=head)  # fmt: skip
    report["model"] = model
    report["auto_would_pick"] = checked_dtype("auto", announce=False, model=model)
    path = _save(report, out, f"dtype_{_label(model)}.json")
    if as_json:
        typer.echo(json.dumps(report))
        return
    for line in format_report(report):
        typer.echo(line)
    typer.echo(f"auto would pick: {report['auto_would_pick']}\nresults: {path}")


def register(app: typer.Typer) -> None:
    """Add the `bench` sub-app (other areas add their bench commands to `bench` in this module)."""
    app.add_typer(bench, name="bench")
