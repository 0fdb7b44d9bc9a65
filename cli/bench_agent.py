"""`bench actions | decisions | precision | cpu-peer`: the hand-written bench commands, which do not fit the
benchmark protocol (`confkv.bench.protocol`): `actions` and `decisions` run the agent in the browser or on a trace DB
(`decisions` also resumes from, and writes, one JSONL per configuration under its own `--out`), `precision` reports
what `--dtype auto` measured rather than running a benchmark, and `cpu-peer` needs an optional package and a GGUF.

`bench decisions` replays recorded episodes of a trace DB (`runner.decisions`) and compares each configuration's
greedy action with the reference's (the first `--dtypes` entry and the first `--policies` entry) state by state.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from cli.bench import _label, _parse_lengths, _save, bench
from cli.options import checked_dtype, dtype_option


def _split(text: str) -> list[str]:
    return list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))


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


@bench.command("decisions")
def decisions(
    db: Path = typer.Option(..., "--db", exists=True, dir_okay=False, help="trace DB with recorded episodes"),
    run: int = typer.Option(..., "--run", min=1, help="the run whose episodes are replayed"),
    model: str = typer.Option("qwen2.5-coder-1.5b", "--model", help="registry name or HF directory"),
    dtypes: str = typer.Option("fp32", "--dtypes", help="precisions, comma-separated; the first is the reference"),
    policies: str = typer.Option("full", "--policies", help="KV policies, comma-separated; the first is the "
                                 "reference"),  # fmt: skip
    states_per_site: int = typer.Option(35, "--states-per-site", min=1, help="cheapest episodes per site until "
                                        "this many states"),  # fmt: skip
    only: str = typer.Option("", "--only", help="replay only these precisions now (the rest are read from "
                             "--out): one process per precision; 'none': only read --out and report"),  # fmt: skip
    shard: str = typer.Option("", "--shard", help="K/N: replay only every N-th episode from the K-th (0-based), "
                              "so N processes split one precision's sample"),  # fmt: skip
    out: str = typer.Option("runs/decisions", "--out", help="directory of the per-configuration JSONL files"),
    report: str = typer.Option("", "--report", help="also write the agreement report JSON here"),
    reference: str = typer.Option("", "--reference", help="'recorded': compare with the run's recorded actions "
                                  "(only if the run is this agent in fp32 under the first policy; fp32 need not be "
                                  "replayed); default: the first --dtypes entry's replay"),  # fmt: skip
    record: bool = typer.Option(False, "--record", help="write each precision's agreement (first policy) to "
                                "$CONFKV_HOME/precision/acceptance.json, which --dtype auto reads"),  # fmt: skip
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Replay the agent's recorded states under each precision x KV policy; greedy-action agreement per site."""
    from agent.model_policy import ModelAgent
    from confkv.models import load_for_inference
    from confkv.policies import get_policy
    from envs import TASKS_DIR
    from envs.taskspec import load_tasks
    from runner import decisions as d
    from runner.decisions import agreement, done_episodes, results_path

    k, _, n = shard.partition("/")
    if shard and not (k.isdigit() and n.isdigit() and int(k) < int(n)):
        raise typer.BadParameter(f"expected K/N with 0 <= K < N, got {shard!r}", param_hint="--shard")
    part = (int(k), int(n)) if shard else (0, 1)
    precisions = [checked_dtype(d, announce=d == "auto", model=model) for d in _split(dtypes)]
    kv = _split(policies)
    for name in kv:
        get_policy(name)  # an unknown name fails before any model is loaded
    if reference not in ("", "recorded"):
        raise typer.BadParameter("expected 'recorded' or nothing", param_hint="--reference")
    if reference == "recorded":
        from runner.worker import agent_identity

        why = d.recorded_reference(db, run, kv[0], agent_identity(reasoning=False))
        if why is None:
            raise typer.BadParameter(f"run {run} is not this agent in fp32 under {kv[0]}: its recorded actions are "
                                     "not fp32's decisions; replay fp32 instead", param_hint="--reference")  # fmt: skip
        typer.echo(f"reference: {why}", err=True)
    intents = {str(t.task_id): t.intent for t in load_tasks(TASKS_DIR)}
    episodes = d.select_episodes(db, run, states_per_site, intents)
    if not episodes:
        raise typer.BadParameter(f"run {run} of {db} has no finished episodes of the suite's tasks")
    typer.echo(f"{len(episodes)} episodes, {sum(len(e.steps) for e in episodes)} states", err=True)
    todo = set(_split(only)) if only else set(precisions)
    for precision in precisions:
        if precision not in todo:
            continue
        loaded: list = []
        for policy in kv:

            def make(policy=policy, precision=precision, loaded=loaded):  # loaded once per precision, if needed
                if not loaded:
                    loaded.extend(load_for_inference(model, precision))
                return ModelAgent(loaded[0], loaded[1], policy, model_name=model)

            d.run_replays(episodes, make, results_path(out, model, precision, policy),
                          lambda m: typer.echo(m, err=True), part)  # fmt: skip
    ref = done_episodes(results_path(out, model, precisions[0], kv[0]))
    rows = []
    for precision in precisions:
        for policy in kv:
            mine = done_episodes(results_path(out, model, precision, policy))
            recorded = agreement(mine, mine, key="recorded")
            row = {"precision": precision, "policy": policy, "episodes": len(mine),
                   "vs_reference": recorded if reference else agreement(ref, mine), "vs_recorded": recorded,
                   "seconds": sum(r["seconds"] for r in mine.values())}  # fmt: skip
            rows.append(row)
    ref_name = f"run {run} recorded" if reference else f"{precisions[0]}/{kv[0]}"
    result = {"model": model, "db": str(db), "run": run, "reference": ref_name,
              "episodes": [e.episode_id for e in episodes], "date": time.strftime("%Y-%m-%d"), "rows": rows}
    if record:
        from confkv.models.precision_choice import local_acceptance

        planned = sum(len(e.steps) for e in episodes)
        records = {r["precision"]: d.acceptance_record(r, planned, ref_name, run, db) for r in rows
                   if r["policy"] == kv[0] and r["vs_reference"]["states"]
                   and (reference or r["precision"] != precisions[0])}  # fmt: skip
        path = d.write_acceptance(local_acceptance(), model, records)
        typer.echo(f"acceptance records for {', '.join(records) or 'nothing'}: {path}", err=True)
    if report:
        _save(result, str(Path(report).parent), Path(report).name)
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(f"{'precision':<20} {'policy':<14} {'states':>6} {'= reference':>11} {'= recorded':>10}  per site")
    for r in rows:
        ref_row = r["vs_reference"]
        sites = ", ".join(f"{s} {v['agreement']:.0%} of {v['states']}" for s, v in ref_row["per_site"].items())
        a = "-" if ref_row["agreement"] is None else f"{ref_row['agreement']:.1%}"
        b = r["vs_recorded"]["agreement"]
        typer.echo(f"{r['precision']:<20} {r['policy']:<14} {ref_row['states']:>6} {a:>11} "
                   f"{'-' if b is None else f'{b:.1%}':>10}  {sites}")  # fmt: skip


@bench.command("precision")
def precision(
    model: str = typer.Option("qwen2.5-coder-1.5b", "--model", help="registry name or HF directory"),
    layer_errors: str = typer.Option("", "--layer-errors", help="also: each Linear's relative error in this "
                                     "precision's INT8 forms on the agent's own prompt (fp32 reference)"),
    top: int = typer.Option(8, "--top", min=1, help="layers listed per phase with --layer-errors"),
    error_forms: str = typer.Option("", "--error-forms", help="also: each Linear's error split by what is "
                                    "quantized, e.g. bf16,w8a8,w8,a8,w8g128,w8a8-sq0.5 (confkv.models.quant_error)"),
    remeasure: bool = typer.Option(False, "--remeasure", help="drop this machine's cached timings first (they "
                                   "were taken under load, or the machine changed)"),  # fmt: skip
    out: str = typer.Option("results", "--out", help="directory for the JSON"),
) -> None:
    """What `--dtype auto` measured on this machine for `model`'s shapes, what it picks, and (optionally) which
    layers an INT8 form hurts most."""
    from confkv.models.load import _config, resolve
    from confkv.models.precision_choice import Shapes, cache_path
    from confkv.models.quant_error import check_forms

    forms = tuple(f.strip() for f in error_forms.split(",") if f.strip())
    if error_forms:
        try:
            check_forms(forms)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--error-forms") from None
    cached = cache_path(Shapes.from_config(_config(resolve(model))))
    if remeasure:
        cached.unlink(missing_ok=True)
    name = checked_dtype("auto", model=model)
    try:
        data = json.loads(cached.read_text())
    except OSError:  # a CUDA device: nothing is timed there
        data = {}
    data.update(model=model, chosen=name)
    if layer_errors:
        import statistics

        import torch

        from confkv.models import load
        from confkv.models.precision import layer_errors as errors_of
        from runner.bench_dtype import agent_prompts

        target = checked_dtype(layer_errors, announce=False)
        mdl, tok = load(model, "fp32")
        head, _ = agent_prompts(tok, 1, 64)
        rows = errors_of(mdl, torch.tensor([head]), target)
        data["layer_errors"] = {"precision": target, "tokens": len(head), "rows": rows}
        for phase in ("prefill", "decode"):
            mine = [r for r in rows if r[1] == phase]
            if mine:
                typer.echo(f"{target} {phase}: median {statistics.median(r[2] for r in mine):.2%} over "
                           f"{len(mine)} layers; largest: " + ", ".join(f"{n} {e:.1%}" for n, _, e in mine[:top]))
    if error_forms:
        data["error_forms"] = _error_forms(model, forms)
    path = _save(data, out, f"precision_{_label(model)}.json")
    typer.echo(f"chosen: {name}\nresults: {path}")


def _error_forms(model: str, forms: tuple[str, ...]) -> dict:
    """Measured on an agent first-step turn (a synthetic page); smoothing calibrated on the system prompt and
    demonstrations, text the measured rows never saw."""
    import torch

    from confkv.models import load
    from confkv.models.quant_error import form_errors, summarize
    from runner.bench_dtype import agent_prompts

    mdl, tok = load(model, "fp32")
    head, turns = agent_prompts(tok, 1, 512)
    rows = summarize(form_errors(mdl, torch.tensor([turns[0]]), forms, calib_ids=torch.tensor([head])))
    typer.echo(f"{'form':<12} {'median':>7} {'mean':>7}  median by kind; worst")
    for r in rows:
        kinds = " ".join(f"{k.removesuffix('_proj')} {v:.2%}" for k, v in r["by_kind"].items())
        worst = ", ".join(f"{n.removeprefix('model.layers.')} {e:.1%}" for n, e in r["worst"])
        typer.echo(f"{r['form']:<12} {r['median']:>7.2%} {r['mean']:>7.2%}  {kinds}; {worst}")
    return {"measured_tokens": len(turns[0]), "calibration_tokens": len(head), "rows": rows}


@bench.command("cpu-peer")
def cpu_peer(
    model: str = typer.Option("qwen2.5-coder-1.5b", "--model", help="registry name (its GGUF is llama.cpp's input)"),
    gguf: Path = typer.Option(None, "--gguf", exists=True, dir_okay=False, help="the GGUF for a model given by path"),
    dtype: str = dtype_option(),
    prefill: str = typer.Option("512,2048", "--prefill", help="prefill lengths"),
    decode: str = typer.Option("1024,4096", "--decode", help="contexts to decode after"),
    steps: int = typer.Option(16, "--steps", min=2, help="decoded tokens per context"),
    out: str = typer.Option("results", "--out", help="directory for the JSON"),
    breakdown: bool = typer.Option(False, "--breakdown", help="also: where our decode step's time goes (decoder "
                                   "Linears, LM head, attention, rest) at each decode context, plain cache"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """llama.cpp (`pip install llama-cpp-python`) vs our plain, full and confkv: prefill tok/s, decode ms/token."""
    from confkv.bench.cpu_peer import format_report, gguf_file, run_cpu_peer
    from confkv.models import MODELS, load_for_inference

    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        raise typer.BadParameter("llama.cpp is not installed: pip install llama-cpp-python (builds from source, "
                                 "~10 min on 2 cores)") from None  # fmt: skip
    if gguf is None and model not in MODELS:
        raise typer.BadParameter("a model given by path needs --gguf (the file llama.cpp runs)")
    name = checked_dtype(dtype, model=model)
    path = gguf or gguf_file(model, lambda m: typer.echo(m, err=True))
    mdl, _ = load_for_inference(model, name)
    report = run_cpu_peer(mdl, path, _parse_lengths(prefill), _parse_lengths(decode), steps,
                          lambda m: typer.echo(m, err=True))  # fmt: skip
    report.update(model=model, date=time.strftime("%Y-%m-%d"))
    if breakdown:
        from confkv.bench.step_breakdown import decode_breakdown

        report["decode_breakdown"] = [decode_breakdown(mdl, c, steps) for c in _parse_lengths(decode)]
    saved = _save(report, out, f"cpu-peer_{_label(model)}_{name}.json")
    if as_json:
        typer.echo(json.dumps(report))
        return
    for line in format_report(report):
        typer.echo(line)
    if breakdown:
        from confkv.bench.step_breakdown import format_breakdown

        for b in report["decode_breakdown"]:
            typer.echo("\n".join(format_breakdown(b)))
    typer.echo(f"results: {saved}")


def register(app: typer.Typer) -> None:
    """The commands are on `bench` (registered by `cli.bench`); importing this module adds them."""
