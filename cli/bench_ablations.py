"""`bench gate-rate | gate-vs-fixed | int8-keys`: the stride-1 ablations of `confkv.bench.ablations` (issue 12).

Each reads the first `--tokens` tokens of the benchmark text (`apt-get install bible-kjv`), prints one line per
variant and writes its JSON under `--out`. They were scripts under `scripts/` until they got a home here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import typer

from cli.bench import _label, _save, bench
from cli.options import checked_dtype, dtype_option


def _run(model: str, tokens: int, dtype: str, job: Callable[[Any, list[int]], dict[str, Any]]) -> dict[str, Any]:
    from confkv.bench.common import CorpusMissingError, corpus_ids
    from confkv.models import load_for_inference

    name = checked_dtype(dtype, model=model)
    mdl, tokenizer = load_for_inference(model, dtype=name)
    try:
        ids = corpus_ids(tokenizer, tokens)
    except (CorpusMissingError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    return {"model": model, "dtype": name, **job(mdl, ids)}


def _emit(result: dict[str, Any], out: str, name: str, lines: list[str], as_json: bool) -> None:
    path = _save(result, out, name)
    if as_json:
        typer.echo(json.dumps(result))
        return
    for line in lines:
        typer.echo(line)
    typer.echo(f"results: {path}")


@bench.command("gate-rate")
def gate_rate(
    model: str = typer.Option("smollm2-135m", "--model", help="registry name or HF directory"),
    tokens: int = typer.Option(512, "--tokens", min=4, help="tokens of the text: the first half prefilled"),
    q: float = typer.Option(0.2, "--q", min=0.0, max=1.0, help="the running quantile of tau=auto:q"),
    dtype: str = dtype_option(),
    out: str = typer.Option("results", "--out", help="results directory"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """How often the confidence gate opens: fixed tau = 0.5 against tau=auto:q, teacher-forced token by token."""
    from confkv.bench.ablations import gate_open_rates

    result = _run(model, tokens, dtype, lambda m, ids: gate_open_rates(m, ids, q))
    lines = [f"tau {tau:10s} " + "  ".join(f"{k} {v:.4f}" for k, v in row.items()) for tau, row in result["gate"].items()]
    _emit(result, out, f"gate-open-{_label(model)}.json", lines, as_json)


@bench.command("gate-vs-fixed")
def gate_vs_fixed_cmd(
    model: str = typer.Option("smollm2-135m", "--model", help="registry name or HF directory"),
    tokens: int = typer.Option(600, "--tokens", min=4),
    tau: str = typer.Option("auto:0.2", "--tau", help="the gated runs' tau"),
    dtype: str = dtype_option(),
    out: str = typer.Option("results", "--out", help="results directory"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The gate against the same ranker with the gate off, at equal mean resident bytes (PPL, stride 1)."""
    from confkv.bench.ablations import gate_vs_fixed

    result = _run(model, tokens, dtype, lambda m, ids: gate_vs_fixed(m, ids, tau))
    lines = [f"{name:28s} ppl {row['ppl']:.3f}  mean KV {row['mean_kv_bytes'] / 2**20:.2f} MiB  gate open "
             f"{row['gate_open_rate']}  {row['overrides']}" for name, row in result["rows"].items()]  # fmt: skip
    _emit(result, out, f"gate-vs-fixed-{_label(model)}.json", lines, as_json)


@bench.command("int8-keys")
def int8_keys(
    model: str = typer.Option("smollm2-135m", "--model", help="registry name or HF directory"),
    tokens: int = typer.Option(600, "--tokens", min=4),
    budget: int = typer.Option(256, "--budget", min=8, help="the fixed budget of the ranker variants"),
    dtype: str = dtype_option(),
    out: str = typer.Option("results", "--out", help="results directory"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """What INT8 costs in PPL at a fixed budget: model dtype, INT8 keys per token, INT8 keys per channel."""
    from confkv.bench.ablations import int8_key_scales

    result = _run(model, tokens, dtype, lambda m, ids: int8_key_scales(m, ids, budget))
    lines = [f"{name:24s} ppl {ppl:.3f}" for name, ppl in result["ppl"].items()]
    _emit(result, out, f"int8-keys-{_label(model)}.json", lines, as_json)


def register(app: typer.Typer) -> None:
    """The commands are on `bench` (registered by `cli.bench`); importing this module adds them."""
