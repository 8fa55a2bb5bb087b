"""Shared pieces of the PyTorch / sparselab training-step timers (see docs/performance.md).

The step is the one bench/train_step.cpp times for sprig: batch 128, fp32,
  mlp  784-1024-1024-10, ReLU, softmax cross-entropy, hidden layers sparse
  ffn  1024 -> 4096 -> 1024, GELU (tanh form), MSE (mean over all elements),
       both layers sparse
SGD with momentum 0.9 (lr 0.01, no weight decay). The input needs no gradient.
Inputs are synthetic (uniform [0,1) pixels / standard normal features, random
labels / targets), as in train_step.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time


def parse_args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", choices=["mlp", "ffn"], required=True)
    p.add_argument("--sparsity", type=float, default=0.0)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--delta-t", type=int, default=100)
    p.add_argument("--set-updates", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def make_data(torch, model: str, batch: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    if model == "mlp":
        x = torch.rand(batch, 784, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
        return x, y, torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 1024, generator=g)
    y = torch.randn(batch, 1024, generator=g)
    return x, y, torch.nn.MSELoss()


def build(torch, model: str, linear_hidden):
    """linear_hidden(in, out) makes a layer that is sparse in the sparse model."""
    nn = torch.nn
    if model == "mlp":
        return nn.Sequential(linear_hidden(784, 1024), nn.ReLU(), linear_hidden(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 10))
    return nn.Sequential(linear_hidden(1024, 4096), nn.GELU(approximate="tanh"), linear_hidden(4096, 1024))


def sgd_step(torch, model, x, y, loss_fn):
    """The step every implementation times: SGD, momentum 0.9, lr 0.01 (sprig's train_step
    defaults), over zero_grad, forward, loss, backward and the optimizer step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step


def time_steps(step, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def quantile(v: list[float], q: float) -> float:
    s = sorted(v)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def report(args, impl: str, steps_ms: list[float], update_ms: float = 0.0, rebuild_ms: float = 0.0,
           extra: dict | None = None) -> None:
    amortised = (update_ms + rebuild_ms) / args.delta_t
    med = statistics.median(steps_ms) + amortised
    row = {
        "model": args.model, "sparsity": args.sparsity, "threads": args.threads, "impl": impl,
        "median_ms": med,
        "p25_ms": quantile(steps_ms, 0.25) + amortised, "p75_ms": quantile(steps_ms, 0.75) + amortised,
        "min_ms": min(steps_ms) + amortised, "max_ms": max(steps_ms) + amortised,
        "steady_ms": statistics.median(steps_ms), "update_ms": update_ms, "rebuild_ms": rebuild_ms,
        "amortised_ms": amortised, "peak_rss_mb": peak_rss_mb(), "steps": len(steps_ms),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", ""),
    }
    if extra:
        row.update(extra)
    print("RESULT " + json.dumps(row), flush=True)
