"""The end-to-end half of the GPU check (issue 39), run by `scripts/gpu_check.sh` after the kernel tests:
`python -m cli.gpu_check --out DIR` writes `gpu_e2e.json` and `gpu_e2e.md` there (a second run with other
`--parts` adds to the same report: the script runs each part in its own process, so a device fault in one cannot
poison the CUDA context of the next).

Why a module of its own, with argparse and nothing of `cli.main`: the GPU machine has PyTorch, Triton and
transformers but not this project's install, and a GPU session lasts 15 minutes; this imports only what each part
needs, runs every part even when one fails (its error and traceback go into the JSON), and stops each long loop at a
time limit. `--smoke` runs the same code at tiny shapes on any device: the test suite runs it on CPU, so the script
that first meets a GPU has already run end to end.

Parts: (2) decode at Qwen2.5-7B shapes, random bf16 weights, 4K/16K/32K context: plain `DynamicCache` + SDPA, our
`full`, `confkv`; (3) resident KV bytes after 4K generated tokens at Qwen2.5-32B shapes (MLP narrowed, which moves
neither KV bytes nor attention), `full` against `confkv`; (4) one forced-mode episode (a recorded reference
trajectory, so no browser is needed) and one `generate` through `ConfKVSession` with a tiny random model, each run
on the device and on the CPU and compared.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRAJECTORY = ROOT / "tests" / "fixtures" / "trajectory-shopping_015.json"
TASK = ROOT / "tasks" / "shopping_015.yaml"


def device_line(device: Any) -> str:
    import torch

    versions = f"torch {torch.__version__}"
    try:
        import triton

        versions += f", triton {triton.__version__}"
    except ImportError:
        pass
    import transformers

    versions += f", transformers {transformers.__version__}"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return f"{name} ({device.type}); {versions}; python {platform.python_version()}"


def part_decode(device: Any, smoke: bool, contexts: list[int]) -> dict[str, Any]:
    import torch

    from confkv.bench.device_e2e import QWEN25_7B, TINY, decode_at_context, random_model, rows_as_dicts

    shape = TINY if smoke else QWEN25_7B
    model = random_model(shape, device, torch.bfloat16)
    decode_at_context(model, min(contexts), steps=4)  # untimed: kernel compiles and library set-up land here
    rows = []
    for ctx in contexts:
        rows += decode_at_context(model, ctx, steps=16 if smoke else 32)
    del model
    return {"shape": shape.name, "dtype": "bf16", "rows": rows_as_dicts(rows)}


def part_memory(device: Any, smoke: bool, n_new: int, time_limit_s: float) -> dict[str, Any]:
    import torch

    from confkv.bench.device_e2e import QWEN25_32B, TINY, kv_after_generation, random_model, rows_as_dicts

    shape, mlp_scale = (TINY, 1.0) if smoke else (QWEN25_32B, 0.125)
    model = random_model(shape, device, torch.bfloat16, mlp_scale=mlp_scale)
    kv_after_generation(model, shape, "confkv", 8)  # untimed: this shape's kernel compiles land here
    full = kv_after_generation(model, shape, "full", n_new, time_limit_s=time_limit_s)
    # confkv generates exactly as many tokens as full got through, so the bytes compare at equal length
    confkv = kv_after_generation(model, shape, "confkv", full.generated, time_limit_s=2 * time_limit_s)
    rows = [full, confkv]
    del model
    return {"shape": shape.name, "mlp_scale": mlp_scale, "dtype": "bf16", "rows": rows_as_dicts(rows),
            "full_over_confkv": rows[0].kv_bytes / rows[1].kv_bytes}  # fmt: skip


def part_forced(device: Any) -> dict[str, Any]:
    """The recorded trajectory scored by the agent on `device` and on the CPU with the same tiny fp32 model:
    decisions and the reference's per-token NLL must match up to float noise."""

    from agent.actions import parse_action
    from agent.model_policy import ModelAgent
    from confkv.policies import get_policy
    from confkv.testing import tiny_chat_tokenizer, tiny_model
    from envs.taskspec import load_task
    from runner.forced import Trajectory, score_trajectory

    task = load_task(TASK, parse_step=parse_action)
    traj = Trajectory.from_json(json.loads(TRAJECTORY.read_text()))
    tok = tiny_chat_tokenizer()
    out: dict[str, Any] = {"task": task.task_id, "steps": len(traj.steps)}
    small = {"n_low": "48", "n_high": "96", "int8_after": "16", "protect": "8"}  # evicts, INT8 and mass: the kernel
    for label, policy in (("full", get_policy("full")),
                          ("sliding@32", get_policy("sliding", {"budget": "32", "sinks": "4", "protect": "8"})),
                          ("confkv@96", get_policy("confkv", small))):  # fmt: skip
        scored = {}
        for where in dict.fromkeys(["cpu", device.type]):
            model, _ = tiny_model("qwen2", max_position_embeddings=65536)
            agent = ModelAgent(model.to(where), tok, policy, model_name="tiny", labels=True)
            try:
                result, tokens, _ = score_trajectory(agent, task, traj)
            finally:
                agent.close()
            scored[where] = (result, [t["nll"] for t in tokens])
        (cpu, cpu_nll), (dev, dev_nll) = scored["cpu"], scored[device.type]
        out[label] = {
            "decisions": json.loads(dev["decisions"]), "same_decisions_as_cpu": dev["decisions"] == cpu["decisions"],
            "max_abs_nll_diff_vs_cpu": max(abs(a - b) for a, b in zip(cpu_nll, dev_nll, strict=True)),
            "answer_nll": dev["answer_nll"], "peak_kv_bytes": dev["peak_kv_bytes"],
            "full_kv_bytes": dev["full_kv_bytes"], "tokens": len(dev_nll),
        }  # fmt: skip
    return out


def part_generate(device: Any) -> dict[str, Any]:
    """`ConfKVSession` greedy decoding under `full` against plain `model.generate` on the device (must agree), and
    under a small confkv budget (evicts on the way)."""
    import torch

    from confkv.policies import get_policy
    from confkv.session import ConfKVSession
    from confkv.testing import tiny_model

    model, vocab = tiny_model("qwen2", max_position_embeddings=65536)
    model = model.to(device)
    prompt = torch.randint(10, vocab - 10, (1, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model.generate(prompt.to(device), max_new_tokens=200, do_sample=False, min_new_tokens=200,
                               pad_token_id=0)[0, prompt.shape[1]:].tolist()  # fmt: skip
    out: dict[str, Any] = {"new_tokens": 200}
    for name, overrides in (("full", {}), ("confkv", {"n_low": "80", "n_high": "120"})):
        session = ConfKVSession(model, get_policy(name, overrides))
        session.append(prompt)
        ids = session.decode(200)
        mem = session.memory()
        out[name] = {"agrees_with_plain_generate": sum(a == b for a, b in zip(ids, plain, strict=False)) / len(plain),
                     "first_difference": next((i for i, (a, b) in enumerate(zip(ids, plain, strict=False)) if a != b),
                                              None),
                     "kv_bytes": mem.kv_bytes, "full_kv_bytes": mem.full_kv_bytes,
                     "kept_tokens": max(mem.kept_tokens)}  # fmt: skip
    return out


def run_part(name: str, fn: Callable[[], dict[str, Any]], report: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    print(f"[gpu_check] {name} ...", flush=True)
    try:
        report[name] = {"ok": True, **fn()}
    except Exception as exc:  # one part's failure must not cost the others (a GPU session is 15 minutes)
        report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        print(report[name]["traceback"], flush=True)
    report[name]["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"[gpu_check] {name}: {'ok' if report[name]['ok'] else 'FAILED'} in {report[name]['seconds']} s", flush=True)


def markdown(report: dict[str, Any]) -> str:
    """The tables of `gpu_e2e.md`: one per part, figures as measured."""
    mib = 2**20
    lines = [f"# GPU end to end ({report['date']})", "", f"Device: {report['device']}", ""]

    def num(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    dec = report.get("decode", {})
    if dec.get("ok"):
        lines += [f"## Decode at {dec['shape']} shapes, random {dec['dtype']} weights", "",
                  "| context | variant | ms/token | tokens/s | prefill s | peak MiB over weights | KV MiB | kept | "
                  "bookkeeping share | gate open |", "|" + "---|" * 10]  # fmt: skip
        for r in dec["rows"]:
            peak = None if r["peak_bytes_over_weights"] is None else r["peak_bytes_over_weights"] / mib
            lines.append(f"| {r['context']} | {r['variant']} | {r['ms_per_token']:.2f} | {r['tokens_per_s']:.1f} | "
                         f"{r['prefill_s']:.2f} | {num(peak, '.0f')} | {r['kv_bytes'] / mib:.1f} | {r['kept_tokens']} | "
                         f"{num(r['bookkeeping_share'], '.1%')} | {num(r['gate_open_rate'], '.0%')} |")  # fmt: skip
        lines.append("")
    mem = report.get("memory", {})
    if mem.get("ok"):
        tokens = mem["rows"][0]["prompt_tokens"] + mem["rows"][0]["generated"]
        lines += [f"## KV bytes after {tokens} tokens (prompt and greedy generation) at {mem['shape']} shapes "
                  f"(MLP x{mem['mlp_scale']})", "",
                  "| policy | prompt | generated / asked | KV MiB | allocated MiB | arithmetic MiB | plain cache MiB | "
                  "peak MiB over weights | kept | gate open | ms/token |", "|" + "---|" * 11]  # fmt: skip
        for r in mem["rows"]:
            peak = None if r["peak_bytes_over_weights"] is None else r["peak_bytes_over_weights"] / mib
            lines.append(f"| {r['policy']} | {r['prompt_tokens']} | {r['generated']} / {r['asked']} | "
                         f"{r['kv_bytes'] / mib:.1f} | {r['alloc_bytes'] / mib:.1f} | "
                         f"{r['kv_bytes_arithmetic'] / mib:.1f} | {r['plain_kv_bytes'] / mib:.1f} | "
                         f"{num(peak, '.0f')} | {r['kept_tokens']} | "
                         f"{num(r['gate_open_rate'], '.0%')} | {r['ms_per_token']:.2f} |")  # fmt: skip
        plain = mem["rows"][0]["plain_kv_bytes"] / mem["rows"][1]["kv_bytes"]
        lines += ["", f"full / confkv resident bytes: {mem['full_over_confkv']:.2f}x (a plain cache of the same "
                  f"tokens / confkv: {plain:.2f}x)", ""]
    forced = report.get("forced", {})
    if forced.get("ok"):
        lines += [f"## One forced episode (task {forced['task']}, {forced['steps']} steps), tiny random fp32 model, "
                  "device against CPU", "", "| label | same decisions as CPU | max abs NLL diff vs CPU | answer NLL | "
                  "peak KV MiB | scored tokens |", "|" + "---|" * 6]  # fmt: skip
        for label in ("full", "sliding@32", "confkv@96"):
            r = forced[label]
            lines.append(f"| {label} | {r['same_decisions_as_cpu']} | {r['max_abs_nll_diff_vs_cpu']:.2e} | "
                         f"{r['answer_nll']:.3f} | {r['peak_kv_bytes'] / mib:.2f} | {r['tokens']} |")  # fmt: skip
        lines.append("")
    gen = report.get("generate", {})
    if gen.get("ok"):
        lines += [f"## generate through ConfKVSession ({gen['new_tokens']} greedy tokens), tiny random fp32 model", "",
                  "| policy | same tokens as plain model.generate | first difference | KV MiB | full KV MiB | kept |",
                  "|" + "---|" * 6]  # fmt: skip
        for name in ("full", "confkv"):
            r = gen[name]
            lines.append(f"| {name} | {r['agrees_with_plain_generate']:.1%} | {num(r['first_difference'], 'd')} | "
                         f"{r['kv_bytes'] / mib:.2f} | {r['full_kv_bytes'] / mib:.2f} | {r['kept_tokens']} |")
        lines.append("")
    failed = [k for k, v in report.items() if isinstance(v, dict) and v.get("ok") is False]
    lines += [f"Failed parts: {', '.join(failed)}" if failed else "Every part ran.", ""]
    for name in failed:
        lines += [f"## {name}: failed", "", "```", report[name]["traceback"], "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(prog="python -m cli.gpu_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for gpu_e2e.json and gpu_e2e.md")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes and lengths (any device; what CI runs)")
    ap.add_argument("--contexts", default=None, help="decode contexts, comma-separated (default 4096,16384,32768)")
    ap.add_argument("--gen-tokens", type=int, default=None, help="tokens generated for the KV-bytes part (4096)")
    ap.add_argument("--time-limit", type=float, default=90.0, help="seconds per generation loop before it stops")
    ap.add_argument("--parts", default="decode,memory,forced,generate")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    contexts = [int(c) for c in (args.contexts or ("256,600" if args.smoke else "4096,16384,32768")).split(",")]
    n_new = args.gen_tokens or (600 if args.smoke else 4096)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gpu_e2e.json"
    report: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}  # earlier parts, other processes
    report.update({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": device_line(device),
                   "smoke": args.smoke})  # fmt: skip
    parts = {
        "decode": lambda: part_decode(device, args.smoke, contexts),
        "memory": lambda: part_memory(device, args.smoke, n_new, args.time_limit),
        "forced": lambda: part_forced(device),
        "generate": lambda: part_generate(device),
    }
    names = [n.strip() for n in args.parts.split(",") if n.strip()]
    unknown = [n for n in names if n not in parts]
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(parts)}")
    for name in names:
        run_part(name, parts[name], report)
        path.write_text(json.dumps(report, indent=2, default=str))  # what ran, kept at once
    (args.out / "gpu_e2e.md").write_text(markdown(report))
    return 0 if all(report[n].get("ok") for n in names) else 1


if __name__ == "__main__":
    raise SystemExit(main())
