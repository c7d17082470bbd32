"""Where a generation's time goes on this machine: prefill and decode steps by batch size.

`bench_rollout` measures whole rollouts; this script takes them apart, on the same
model and a cache as long as a SysDiag prompt (random token ids: the cost does not
depend on their values). For each batch size B it prints
- prefill: seconds per row of one left-padded forward over B prompts (compute-bound on a
  CPU: batching rows should not make a row cheaper);
- decode: milliseconds per decode step of B rows and per generated token, and the
  speed-up of a token against B = 1 -- the ceiling of batched generation's gain, before
  prefill, rows that stop early and the rollout loop take their share;
- the share of one decode step spent in matrix multiplies (weights: memory-bound at
  B = 1, compute-bound as B grows) and in attention (reads the whole KV cache of every
  row), from torch.profiler (on a GPU: shares of the step's kernel time).

    python -m creditgym.benchmarks.perf.bench_decode             # smollm2-135m, B = 1 4 8 16
    python -m creditgym.benchmarks.perf.bench_decode --threads 2 --context 600
    python -m creditgym.benchmarks.perf.bench_decode --device cuda
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import Stopwatch, machine_state
from creditgym.models.kv_cache import cache_keyword, growing_cache
from creditgym.models.registry import ModelUnavailableError, load_model

MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm"}


@dataclass(frozen=True)
class BenchArgs:
    """Time prefill and decode steps of one model by batch size."""

    model: str = "smollm2-135m"
    """Model name or path."""
    batch_sizes: tuple[int, ...] = (1, 4, 8, 16)
    """Rows decoded together, one measurement each."""
    context: int = 450
    """Prompt + generated tokens in the cache (about a SysDiag prompt)."""
    steps: int = 10
    """Timed decode steps per batch size."""
    threads: int = 1
    """torch CPU threads."""
    device: str = "cpu"
    """Torch device of the model (cpu, cuda)."""


def decode_costs(model, batch: int, context: int, steps: int) -> tuple[float, float, dict]:
    """(prefill seconds per row, decode seconds per step, profiler shares of a step)."""
    torch.manual_seed(0)
    on_gpu = model.device.type == "cuda"
    # A GPU runs asynchronously: wait for its queue before a stopwatch stops.
    wait = torch.cuda.synchronize if on_gpu else lambda: None
    vocab = model.config.vocab_size
    input_ids = torch.randint(100, vocab - 1, (batch, context)).to(model.device)
    mask = torch.ones_like(input_ids)
    mask[1:, : context // 8] = 0  # left padding on all rows but one, as in a real batch
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = growing_cache()
    prefill_watch, decode_watch = Stopwatch(), Stopwatch()
    with torch.no_grad(), prefill_watch:
        model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_keyword(model): cache},
        )
        wait()
    prefill = prefill_watch.wall_s / batch
    with torch.no_grad():
        state = {"mask": mask, "next": mask.sum(-1, keepdim=True)}
        token = torch.full((batch, 1), 100, device=model.device)

        def step() -> None:
            state["mask"] = torch.cat([state["mask"], state["mask"].new_ones(batch, 1)], -1)
            model(
                input_ids=token,
                attention_mask=state["mask"],
                position_ids=state["next"],
                use_cache=True,
                **{cache_keyword(model): cache},
            )
            state["next"] = state["next"] + 1

        step()  # warm-up
        wait()
        with decode_watch:
            for _ in range(steps):
                step()
            wait()
        decode = decode_watch.wall_s / steps
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
        with profile(activities=activities) as prof:
            for _ in range(3):
                step()
            wait()
    totals = {"matmul": 0.0, "attention": 0.0, "all": 0.0}
    for event in prof.key_averages():
        if on_gpu:
            # Kernels are the device's events; an op's own kernels are its self device time.
            if event.device_type == DeviceType.CUDA:
                totals["all"] += event.self_device_time_total
                continue
            spent = event.self_device_time_total
        else:
            spent = event.self_cpu_time_total
            totals["all"] += spent
        if event.key in MATMUL_OPS:
            totals["matmul"] += spent
        elif "attention" in event.key or event.key == "aten::_softmax":
            totals["attention"] += spent
    shares = {k: totals[k] / totals["all"] for k in ("matmul", "attention")}
    return prefill, decode, shares


def main(args: BenchArgs) -> None:
    if not args.batch_sizes or min(args.batch_sizes) < 1 or args.context < 8 or args.steps < 1:
        raise SystemExit("error: batch sizes and --steps must be >= 1, --context >= 8")
    torch.set_num_threads(args.threads)
    try:
        model = load_model(args.model, device=args.device).model
    except ModelUnavailableError as error:
        raise SystemExit(f"error: {error}") from None
    print(machine_state())
    print(f"model={args.model} context={args.context} threads={args.threads} device={args.device}")
    print(
        f"{'batch':>5} {'prefill s/row':>13} {'step ms':>8} {'ms/token':>8} "
        f"{'token x':>7} {'matmul':>6} {'attn':>6}"
    )
    single = None
    for batch in args.batch_sizes:
        prefill, decode, shares = decode_costs(model, batch, args.context, args.steps)
        per_token = decode / batch
        single = single or (per_token if batch == 1 else None)
        speedup = f"{single / per_token:6.2f}x" if single else "      -"
        print(
            f"{batch:>5} {prefill:>13.3f} {1000 * decode:>8.1f} {1000 * per_token:>8.1f} "
            f"{speedup} {shares['matmul']:>6.0%} {shares['attention']:>6.0%}",
            flush=True,
        )
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_decode"))
