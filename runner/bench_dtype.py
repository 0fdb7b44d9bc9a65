"""`bench dtype`: fp32 vs bf16 (etc.) on agent-shaped steps; the timing loop is `confkv.bench.dtype`, the prompts are
the agent's own (system prompt, demonstrations, a first-step user turn), which is why the benchmark lives above
`agent/` (and `bench precision` reuses `agent_prompts`).
"""

from __future__ import annotations

from dataclasses import dataclass

from confkv.bench.dtype import format_report, run_dtype_bench
from confkv.bench.protocol import Benchmark, Progress, option, resolve_dtype

_DTYPE_INTENTS = ("What colour options does the Harbor Lamp come in?", "Open the newest notice and reply 'Thanks'.",
                  "How many reviews does the second result have?", "Find the cheapest kettle and answer its price.")


def agent_prompts(tokenizer, n: int, tokens: int) -> tuple[list[int], list[list[int]]]:
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


@dataclass
class DtypeOptions:
    model: str = option("qwen2.5-coder-1.5b", "registry name or HF directory")
    dtypes: str = option("fp32,bf16", "comma-separated, the first is the reference")
    prompts: int = option(4, "agent-shaped prompts (interleaved across dtypes)", low=1)
    prompt_tokens: int = option(1024, "tokens per step prompt (after the shared system prompt + demo)", low=16)
    decode: int = option(16, "greedy tokens per prompt", low=2)


def run(opts: DtypeOptions, progress: Progress) -> dict:
    from confkv.models import load
    from confkv.models.load import load_tokenizer

    names = [resolve_dtype(d.strip(), opts.model, progress, announce=d.strip() == "auto", option_name="dtypes")
             for d in opts.dtypes.split(",") if d.strip()]  # fmt: skip
    tokenizer = load_tokenizer(opts.model)  # the weights are loaded once per dtype below, not for the tokenizer
    head, steps = agent_prompts(tokenizer, opts.prompts, opts.prompt_tokens)
    report = run_dtype_bench(lambda d: load(opts.model, dtype=d)[0], names, steps, opts.decode, progress=progress,
                             prefix=head)  # fmt: skip
    report["model"] = opts.model
    report["auto_would_pick"] = resolve_dtype("auto", opts.model, progress, announce=False)
    return report


BENCHMARK = Benchmark(
    "dtype", DtypeOptions, run, lambda r: [*format_report(r), f"auto would pick: {r['auto_would_pick']}"],
    help="fp32 vs bf16 (etc.) on agent-shaped steps in one run: prefill tok/s, decode ms/token, step time, greedy.",
)
