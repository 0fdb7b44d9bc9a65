"""`bench decode`: decode speed after long contexts for plain transformers, our `full`, and `confkv`, side by side.

Protocol: for each context length and repeat, each variant prefills the same token ids (Conf-KV prefills in chunks
with eviction in between), then all three decode `steps` tokens teacher-forced from the same ids (rounded up to two
or more whole eviction cycles of the policy's `slack`, see `whole_cycles`), one step of each variant in turn, so
machine noise (a shared 2-core VM drifts by 10% between minutes) hits all of them alike; the per-step figure is the
median over repeats of the mean step time.
The policy's own bookkeeping (EMA, INT8 migration, ranking, compaction, and the confidence of each step) is timed
inside the cache and session and reported as a share of the step. Attention-mass output is part of the attention
call and is not separated here (see `bench kernel` for its cost).

Prefill: `full` and `confkv` append the context in `prefill_chunk`-token chunks (the agent's shape, eviction after
every chunk for confkv); that append is timed too and reported as prefill tokens/s (plain prefills in one forward
and is not comparable, so it has none). On CUDA every variant synchronises before each clock read.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch
from transformers import DynamicCache

from confkv.bench.protocol import Benchmark, OptionError, Progress, ints, label, option, resolve_dtype
from confkv.cache import cache_kwarg
from confkv.policies import get_policy
from confkv.session import ConfKVSession


@dataclass
class DecodeRow:
    context: int
    variant: str
    ms_per_step: float
    tokens_per_s: float
    bookkeeping_share: float | None
    kept_tokens: int
    kv_bytes: int
    prefill_tokens_per_s: float | None = None
    gate_open_rate: float | None = None  # share of the run's forwards the confidence gate opened on (gated only)


def device_clock(device: torch.device) -> float:
    """perf_counter after the device finished its queued work (CUDA launches are asynchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class PlainDecoder:
    """transformers' own `DynamicCache` decode: the baseline every ratio is against."""

    def __init__(self, model, ids: torch.Tensor) -> None:
        self.model, self.device = model, next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.kw = {cache_kwarg(model): self.cache, "use_cache": True}
        self.pos = ids.shape[1]
        with torch.no_grad():
            model(ids.to(self.device), **self.kw, logits_to_keep=1)

    def step(self, tok: int) -> None:
        with torch.no_grad():
            self.model(torch.tensor([[tok]], device=self.device), **self.kw,
                       position_ids=torch.tensor([[self.pos]], device=self.device))
        self.pos += 1

    def figures(self) -> tuple[None, int, int, None]:
        kv = sum(layer.keys.numel() * layer.keys.element_size() * 2 for layer in self.cache.layers)
        return None, self.cache.get_seq_length(), kv, None


class SessionDecoder:
    """A `ConfKVSession` with one policy; its prefill (chunked, eviction between chunks) is timed."""

    def __init__(self, model, ids: torch.Tensor, policy) -> None:
        self.session = ConfKVSession(model, policy)
        self.session.cache.sync_for_timing = self.session.device.type == "cuda"  # bookkeeping: its own device time
        t0 = device_clock(self.session.device)
        self.session.append(ids)
        self.prefill_tok_s = ids.shape[1] / (device_clock(self.session.device) - t0)
        self.session.cache.bookkeeping_s = 0.0

    def step(self, tok: int) -> None:
        self.session.step(tok)

    def figures(self) -> tuple[float, int, int, float | None]:
        """(bookkeeping seconds, mean kept tokens, KV bytes, gate-open rate)."""
        cache = self.session.cache
        mem = cache.memory()
        return cache.bookkeeping_s, round(sum(mem.kept_tokens) / len(mem.kept_tokens)), mem.kv_bytes, cache.gate_open_rate


def whole_cycles(steps: int, slack: int) -> int:
    """Steps rounded up to at least two whole eviction cycles (`slack + 1` steps each): with slack, only one step
    in `slack + 1` evicts, so a shorter window would time the cheap steps only and flatter the cache."""
    cycle = slack + 1
    return max(2 * cycle, -(-steps // cycle) * cycle) if slack else steps


def run_decode_bench(
    model, vocab_size: int, contexts: list[int], steps: int = 16, repeats: int = 3, confkv_overrides: dict | None = None,
    seed: int = 0,
) -> dict:
    from confkv.kernels import cpu_decode

    gen = torch.Generator().manual_seed(seed)
    # Build (or load) the CPU decode kernel before any clock starts; the report says which path ran.
    kernel = model.device.type == "cpu" and cpu_decode.active()
    policies = {"full": get_policy("full"), "confkv": get_policy("confkv", confkv_overrides or {})}
    steps = whole_cycles(steps, policies["confkv"].slack)
    rows: list[DecodeRow] = []
    for ctx in contexts:
        ids = torch.randint(10, vocab_size - 10, (1, ctx), generator=gen)
        samples: dict[str, list[float]] = {"plain": [], "full": [], "confkv": []}
        prefill: dict[str, list[float]] = {"full": [], "confkv": []}
        extra: dict[str, tuple] = {}
        for _ in range(repeats):
            runs = {"plain": PlainDecoder(model, ids)} | {name: SessionDecoder(model, ids, pol) for name, pol in policies.items()}
            spent = dict.fromkeys(runs, 0.0)
            device = runs["plain"].device
            for tok in ids[0, :steps].tolist():  # one step of each variant in turn: noise hits all of them alike
                for name, run in runs.items():
                    t0 = device_clock(device)
                    run.step(tok)
                    spent[name] += device_clock(device) - t0
            for name, run in runs.items():
                samples[name].append(spent[name] / steps)
                book, kept, kv, gate = run.figures()
                extra[name] = (None if book is None else book / spent[name], kept, kv, gate)
                if name in prefill:
                    prefill[name].append(run.prefill_tok_s)
        for name, vals in samples.items():
            med = statistics.median(vals)
            share, kept, kv, gate = extra[name]
            tok_s = statistics.median(prefill[name]) if name in prefill else None
            rows.append(DecodeRow(ctx, name, med * 1000, 1.0 / med, share, kept, kv, tok_s, gate))
    return {
        "contexts": contexts,
        "steps": steps,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "prefill_chunk": policies["confkv"].prefill_chunk,
        "cpu_decode_kernel": kernel,
        "cpu_decode_kernel_error": cpu_decode.build_error(),
        "confkv_policy": policies["confkv"].to_dict(),
        "rows": [asdict(r) for r in rows],
    }


def speedups(report: dict) -> dict[int, dict[str, float]]:
    """Per context: plain ms / variant ms (>1 = faster than plain transformers)."""
    by_ctx: dict[int, dict[str, float]] = {}
    for row in report["rows"]:
        by_ctx.setdefault(row["context"], {})[row["variant"]] = row["ms_per_step"]
    return {ctx: {k: v["plain"] / ms for k, ms in v.items()} for ctx, v in by_ctx.items()}


def prefill_ratios(report: dict) -> dict[int, float]:
    """Per context: confkv prefill tokens/s over full's (>= 0.9 is the target)."""
    by_ctx: dict[int, dict[str, float]] = {}
    for row in report["rows"]:
        if row.get("prefill_tokens_per_s"):
            by_ctx.setdefault(row["context"], {})[row["variant"]] = row["prefill_tokens_per_s"]
    return {ctx: v["confkv"] / v["full"] for ctx, v in by_ctx.items() if "confkv" in v and "full" in v}


@dataclass
class DecodeOptions:
    model: str = option("smollm2-135m")
    contexts: str = option("512,1024,2048,4096,8192", "context lengths, comma-separated")
    steps: int = option(16, "decode steps timed per run", low=1)
    repeats: int = option(3, "interleaved repeats (median reported)", low=1)
    quick: bool = option(False, "contexts 512,2048,4096 and 2 repeats")
    overrides: list[str] | None = option(None, "confkv policy override key=value", flag="--set")
    dtype: str = option("auto", kind="dtype")
    dtypes: str | None = option(None, "several dtypes in one run, comma-separated (e.g. fp32,bf16): one table, a "
                                "JSON per dtype; overrides --dtype")  # fmt: skip


def run(opts: DecodeOptions, progress: Progress) -> dict:
    """One `run_decode_bench` per dtype, each on its own load of the model: {"model", "per_dtype", "reports"}."""
    from confkv.models import load
    from confkv.policies import parse_overrides

    contexts = ints("512,2048,4096" if opts.quick else opts.contexts, "contexts")
    wanted = [d.strip() for d in (opts.dtypes.split(",") if opts.dtypes else [opts.dtype]) if d.strip()]
    if not wanted:
        raise OptionError("dtypes", f"expected comma-separated dtypes, got {opts.dtypes!r}")
    chosen = [resolve_dtype(d, opts.model, progress, option_name="dtypes" if opts.dtypes else "dtype") for d in wanted]
    overrides = parse_overrides(opts.overrides)
    reports = []
    for name in dict.fromkeys(chosen):
        model, _ = load(opts.model, dtype=name)
        report = run_decode_bench(model, model.config.vocab_size, list(contexts), opts.steps,
                                  2 if opts.quick else opts.repeats, overrides)  # fmt: skip
        report["model"], report["dtype"] = opts.model, name
        reports.append(report)
        del model
    return {"model": opts.model, "per_dtype": bool(opts.dtypes), "reports": reports}


def table(result: dict):
    """One rich table over every dtype's rows; ratios are within one dtype."""
    from rich.table import Table

    first = result["reports"][0]
    t = Table(title=f"decode ms/step, {result['model']}, {first['threads']} threads, median of {first['repeats']}")
    for col in ("dtype", "context", "variant", "ms/step", "vs plain", "bookkeeping", "kept tokens", "KV MiB",
                "prefill tok/s", "gate open"):
        t.add_column(col, justify="right")
    for report in result["reports"]:
        ups = speedups(report)
        for r in report["rows"]:
            share = "" if r["bookkeeping_share"] is None else f"{100 * r['bookkeeping_share']:.1f}%"
            pre = "" if not r.get("prefill_tokens_per_s") else f"{r['prefill_tokens_per_s']:.0f}"
            gate = "" if r.get("gate_open_rate") is None else f"{100 * r['gate_open_rate']:.0f}%"
            t.add_row(report["dtype"], str(r["context"]), r["variant"], f"{r['ms_per_step']:.1f}",
                      f"{ups[r['context']][r['variant']]:.2f}x", share, str(r["kept_tokens"]),
                      f"{r['kv_bytes'] / 2**20:.1f}", pre, gate)
    return t


BENCHMARK = Benchmark(
    "decode", DecodeOptions, run, table,
    files=lambda opts, r: {f"decode_{label(r['model'])}" + (f"_{rep['dtype']}" if r["per_dtype"] else "") + ".json":
                           rep for rep in r["reports"]},
    printed=lambda r: r["reports"] if r["per_dtype"] else r["reports"][0],
    help="Decode ms/step after N context tokens: plain DynamicCache vs our `full` vs `confkv`, interleaved; and "
         "prefill tokens/s of `full` and `confkv`. Ratios are within one dtype.",
)
