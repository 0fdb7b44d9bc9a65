"""`--dtype auto`: the precision this machine runs an agent step fastest in, found by timing, never by CPU flags.

Why measure: three CPU kinds have run this project and each one proved a flag rule wrong (an EPYC with AVX512-BF16
multiplied bf16 matrices 3x faster than fp32 yet decoded 1.9x slower). So on first use, for one decoder layer of the
model's own shapes (q, k, v, o, gate, up, down), every weight form is timed on a prefill chunk (`CHUNK` rows) and on
one decode row, in the thread count the process will run with; the result is cached per CPU kind
(`confkv.cpu.cpu_kind`: a Zen 3 and a Zen 5 both call themselves "AMD EPYC"), torch version, thread count and shapes
under `$CONFKV_HOME/precision/`. Attention, norms and the LM head are not timed (they are the
same work in every weight form; their dtype cost is the one thing this leaves out).

The choice: among the precisions this model is allowed (`allowed`: fp32 always; any other only where a
decision-agreement record says it keeps >= 97% of fp32's greedy actions, `ACCEPTANCE`), the one whose agent step is
fastest, a step being `STEP_PREFILL` prefilled tokens plus `STEP_DECODE` decoded tokens (run 3's median turn), and
whose weights fit in memory. Tests inject timings (`choose`); `measure` is the only part that touches the clock.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from confkv.cpu import cpu_kind
from confkv.models.precision import ACT_DTYPES, DOWN_PROJ, PRECISIONS, Int8Linear, Precision

CHUNK = 512  # rows of a prefill chunk (KVPolicy.prefill_chunk's default)
STEP_PREFILL, STEP_DECODE = 1600, 16  # an agent turn of run 3: ~8.2K prefilled tokens in 5 steps; short replies
MIN_AGREEMENT = 0.97
ACCEPTANCE = Path(__file__).with_name("precision_acceptance.json")
MEMORY_HEADROOM = 0.6  # weights may take at most this share of available memory (KV, activations, browser: the rest)

LINEAR_NAMES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                "mlp.up_proj", DOWN_PROJ)  # Shapes.from_config's order (what `w8a8d` resolves by)
Timings = dict[str, float]  # "bf16/prefill/float" -> ms for one layer's Linears


@dataclass(frozen=True)
class Shapes:
    """One decoder layer's Linear shapes (in, out) and the count of such layers."""

    linears: tuple[tuple[int, int], ...]
    layers: int

    @classmethod
    def from_config(cls, config: Any) -> Shapes:
        h = config.hidden_size
        heads = config.num_attention_heads
        kv = getattr(config, "num_key_value_heads", None) or heads
        dim = getattr(config, "head_dim", None) or h // heads
        inter = config.intermediate_size
        return cls(((h, heads * dim), (h, kv * dim), (h, kv * dim), (heads * dim, h), (h, inter), (h, inter),
                    (inter, h)), config.num_hidden_layers)  # fmt: skip

    @property
    def params(self) -> int:
        return self.layers * sum(i * o for i, o in self.linears)

    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:12]


def _forms(phase: str) -> Iterable[tuple[str, str]]:
    """(act, form) pairs some registered precision uses in `phase`."""
    seen = []
    for p in PRECISIONS.values():
        pair = (p.act, getattr(p, phase))
        if pair not in seen and p.act != "fp16":  # fp16 is for CUDA; its CPU matmuls are emulated
            seen.append(pair)
    return seen


def _layer(shapes: Shapes, act: str, phase: str, form: str) -> list[Int8Linear]:
    prec = Precision("probe", act, form if phase == "prefill" else "float", form if phase == "decode" else "float")
    names = LINEAR_NAMES if len(shapes.linears) == len(LINEAR_NAMES) else ("",) * len(shapes.linears)
    out = []
    for (i, o), name in zip(shapes.linears, names, strict=True):
        lin = torch.nn.Linear(i, o, bias=False)
        torch.nn.init.normal_(lin.weight, std=0.02)
        lin = lin.to(ACT_DTYPES[act])
        out.append(Int8Linear(lin, prec, name))
    return out


def measure(shapes: Shapes, reps: int = 5, progress: Callable[[str], None] = lambda _: None) -> Timings:
    """ms per decoder layer's Linears, per act/phase/form: the minimum of `reps`, forms interleaved so that load on
    the machine hits them alike."""
    from confkv.models.gemv import row_kernel, set_row_kernel, time_row_kernels

    rows_ms = time_row_kernels(shapes.linears, reps)
    was = row_kernel()
    set_row_kernel(min(rows_ms, key=rows_ms.__getitem__))  # the bf16 decode forms below run through the faster one
    try:
        return _time_forms(shapes, reps, progress) | {f"row/{k}": v for k, v in rows_ms.items()}
    finally:
        set_row_kernel(was)  # a measurement leaves the process as it found it; `auto_precision` sets the kernel


def _time_forms(shapes: Shapes, reps: int, progress: Callable[[str], None]) -> Timings:
    layers, inputs = {}, {}
    for phase, rows in (("prefill", CHUNK), ("decode", 1)):
        for act, form in _forms(phase):
            key = f"{act}/{phase}/{form}"
            layers[key] = _layer(shapes, act, phase, form)
            inputs[key] = [torch.randn(rows, i).to(ACT_DTYPES[act]) for i, _ in shapes.linears]
    best = dict.fromkeys(layers, float("inf"))
    progress(f"timing {len(layers)} weight forms on one layer's shapes ({torch.get_num_threads()} threads)")
    with torch.no_grad():
        for rep in range(reps + 1):
            for key, mods in layers.items():
                t0 = time.perf_counter()
                for mod, x in zip(mods, inputs[key], strict=True):
                    mod(x)
                if rep:  # the first pass warms up (oneDNN / fbgemm pick and cache their kernels)
                    best[key] = min(best[key], (time.perf_counter() - t0) * 1000)
    return best


def row_kernel_of(timings: Timings) -> str | None:
    """The bf16 row kernel the timings found faster (None for timings taken before kernels were compared)."""
    rows = {k.removeprefix("row/"): v for k, v in timings.items() if k.startswith("row/")}
    return min(rows, key=rows.__getitem__) if rows else None


def use_measured_row_kernel(config: Any) -> str | None:
    """Set this process's bf16 row kernel from this machine's cached timings for `config`'s shapes, if any (never
    measures: an explicit precision must not cost a minute of timing); returns a line saying which, or None."""
    from confkv.models.gemv import set_row_kernel

    try:
        timings = _read_cache(cache_path(Shapes.from_config(config)))["timings"]
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return None
    kernel = row_kernel_of(timings)
    if kernel is None:
        return None
    set_row_kernel(kernel)
    return _row_line(kernel, timings)


def _row_line(kernel: str, timings: Timings) -> str:
    measured = ", ".join(f"{k.removeprefix('row/')} {v:.2f} ms" for k, v in sorted(timings.items())
                         if k.startswith("row/"))  # fmt: skip
    return f"bf16 decode rows via {kernel} (one layer's rows: {measured})"


def _read_cache(path: Path) -> dict[str, Any]:
    """This machine's cached timings file (raises OSError / ValueError when absent or unreadable)."""
    return json.loads(path.read_text())


def cache_path(shapes: Shapes) -> Path:
    from confkv.models.home import confkv_home

    ident = f"{cpu_kind()}|torch {torch.__version__}|threads {torch.get_num_threads()}|{shapes.key()}"
    return confkv_home() / "precision" / f"{hashlib.sha256(ident.encode()).hexdigest()[:16]}.json"


def cached_timings(shapes: Shapes, progress: Callable[[str], None] = lambda _: None) -> tuple[Timings, str]:
    """Timings from the cache, or measured now and cached; with where they came from."""
    path = cache_path(shapes)
    wanted = {f"{act}/{phase}/{form}" for phase in ("prefill", "decode") for act, form in _forms(phase)}
    wanted |= {"row/mv", "row/linear"}
    try:
        data = _read_cache(path)
        if wanted <= set(data["timings"]):  # a newer registry's forms are measured anew
            return data["timings"], f"measured {data['date']} on {data['cpu']} (cached: {path})"
    except (OSError, ValueError, KeyError):
        pass
    timings = measure(shapes, progress=progress)
    data = {"cpu": cpu_kind(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "shapes": [list(s) for s in shapes.linears], "date": time.strftime("%Y-%m-%d"), "timings": timings}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
    return timings, f"measured now on {cpu_kind()} (cached: {path})"


def local_acceptance() -> Path:
    """This machine's acceptance records (`bench decisions --record` writes them), overlaying the shipped file."""
    from confkv.models.home import confkv_home

    return confkv_home() / "precision" / "acceptance.json"


def acceptance(model_name: str | None, path: Path = ACCEPTANCE) -> dict[str, dict[str, Any]]:
    """precision -> its decision-agreement record for `model_name` (`agreement` with fp32's greedy actions on the
    agent's recorded states, `states` replayed, `planned` states of the full sample): the shipped file, overlaid by
    this machine's `$CONFKV_HOME/precision/acceptance.json` (what `bench decisions --record` writes)."""
    out: dict[str, dict[str, Any]] = {}
    for source in (path, local_acceptance()):
        try:
            records = json.loads(source.read_text())
        except (OSError, ValueError):
            continue
        for name, record in records.get(model_name or "", {}).get("precisions", {}).items():
            out[PRECISIONS[name].name if name in PRECISIONS else name] = record  # `int8` is fp32-w8a8-w8a8
    return out


def verdict(record: dict[str, Any]) -> tuple[bool, str]:
    """(accepted, why) for one record: accepted only when every planned state was replayed and >= 97% agree; a
    partial record is already rejected when even agreement on every remaining state could not reach 97%."""
    agree, states = float(record["agreement"]), int(record.get("states", 0))
    planned = int(record.get("planned", states))
    text = f"agreement {agree:.1%} with fp32's greedy actions on {states} states"
    if states >= planned:
        return agree >= MIN_AGREEMENT, text if agree >= MIN_AGREEMENT else f"not: {text}"
    best = (round(agree * states) + planned - states) / planned
    if best < MIN_AGREEMENT:
        return False, f"not: {text} of {planned} (at most {best:.1%} reachable)"
    return False, f"not: pending ({text} of {planned} so far)"


def allowed(model_name: str | None, path: Path = ACCEPTANCE) -> dict[str, str]:
    """precision -> why it may (or may not: the reason starts with 'not') be chosen for this model. Only fp32, the
    reference, needs no record: bf16 moves the residual stream too, and on the 1.5B that alone flips decisions."""
    records = acceptance(model_name, path)
    out = {}
    for name, p in PRECISIONS.items():
        if name != p.name:
            continue
        if name == "fp32":
            out[name] = "the reference"
        elif name in records:
            out[name] = verdict(records[name])[1]
        else:
            out[name] = "not: no decision-agreement record for this model"
    return out


def weight_bytes(p: Precision, shapes: Shapes) -> int:
    """Resident bytes of the quantizable weights in `p`: the down projection apart where `w8a8d` holds it in bf16."""
    if p.prefill != "w8a8d" or len(shapes.linears) != len(LINEAR_NAMES):
        return int(p.weight_bytes_per_param() * shapes.params)
    i, o = shapes.linears[LINEAR_NAMES.index(DOWN_PROJ)]
    down = shapes.layers * i * o
    rest = p.for_layer("").weight_bytes_per_param() * (shapes.params - down)
    return int(rest + p.for_layer(DOWN_PROJ).weight_bytes_per_param() * down)


def step_ms(p: Precision, timings: Timings, layers: int) -> float | None:
    """Estimated Linear time of one agent step in `p` (None if a form was not timed)."""
    pre, dec = timings.get(f"{p.act}/prefill/{p.prefill}"), timings.get(f"{p.act}/decode/{p.decode}")
    if pre is None or dec is None:
        return None
    return layers * (pre * STEP_PREFILL / CHUNK + dec * STEP_DECODE)


@dataclass
class Choice:
    precision: Precision
    lines: list[str]  # what was measured and why this one


def choose(timings: Timings, shapes: Shapes, reasons: dict[str, str], source: str,
           available_bytes: int | None = None) -> Choice:  # fmt: skip
    """The fastest allowed precision whose weights fit; the lines say what each candidate would cost."""
    rows = []
    for name, p in PRECISIONS.items():
        ms = step_ms(p, timings, shapes.layers)
        if ms is None or name != p.name:  # an alias (`int8`) is listed under its own name
            continue
        weights = weight_bytes(p, shapes)
        why = reasons.get(name, "not: unknown")
        if available_bytes is not None and weights > MEMORY_HEADROOM * available_bytes:
            why = f"not: its weights ({weights / 2**30:.1f} GiB) exceed {MEMORY_HEADROOM:.0%} of available memory"
        rows.append((ms, name, p, weights, why))
    ok = [r for r in rows if not r[4].startswith("not")]
    if not ok:
        raise RuntimeError("no precision is allowed here")
    best = min(ok)
    fp32 = next((r[0] for r in rows if r[1] == "fp32"), best[0])
    lines = [f"precision auto: {source}; Linear ms per agent step ({STEP_PREFILL} prefilled + {STEP_DECODE} "
             f"decoded tokens, {shapes.layers} layers):"]  # fmt: skip
    for ms, name, _, weights, why in sorted(rows):
        mark = "->" if name == best[1] else "  "
        lines.append(f"  {mark} {name:<17} {ms:8.0f} ms ({fp32 / ms:4.2f}x fp32)  weights {weights / 2**30:4.1f} GiB"
                     f"  {why}")  # fmt: skip
    lines.append(f"  per phase, ms per layer: prefill ({CHUNK} rows) " +
                 ", ".join(f"{k}={v:.1f}" for k, v in sorted(timings.items()) if "/prefill/" in k) +
                 "; decode (1 row) " + ", ".join(f"{k}={v:.2f}" for k, v in sorted(timings.items())
                                                 if "/decode/" in k))  # fmt: skip
    kernel = row_kernel_of(timings)
    if kernel:
        lines.append(f"  {_row_line(kernel, timings)}")
    return Choice(best[2], lines)


def available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def auto_precision(config: Any, model_name: str | None, progress: Callable[[str], None] = lambda _: None) -> Choice:
    """`--dtype auto` on a CPU: measure (or read the cache), then choose."""
    from confkv.models.gemv import set_row_kernel

    shapes = Shapes.from_config(config)
    timings, source = cached_timings(shapes, progress)
    set_row_kernel(row_kernel_of(timings) or "mv")
    return choose(timings, shapes, allowed(model_name), source, available_memory())
