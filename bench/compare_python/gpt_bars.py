"""The GPT step's speed bars in one command: sprig's gpt_step and PyTorch's step (gpt_torch.py
time) alternated round by round on one machine, then every ratio per round, its median and
how many rounds held it.

Optional tooling: nothing in the library, its tests or its CMake build depends on Python.

    python3 bench/compare_python/gpt_bars.py --build build/dev            # 3 rounds, mini40m
    python3 bench/compare_python/gpt_bars.py --build build/dev --rounds 5 --steps 7 --csv bars.csv

A round runs `gpt_step --variants all/8x8/bf16 all/bf16 all/8x8 all --threads 1 2 --profile ""`
(mini40m, or the layers of --config small) and then `gpt_torch.py time --impls
torch-dense-bf16,torch-dense` at the same config and threads, so slow spells of a shared
machine hit both sides of a ratio alike. The ratios (a step's time over another's):

    sprig fp32 over PyTorch fp32, 1 thread    unstructured >= 2.5, 8x8 >= 3.2
    sprig fp32, 2 threads over 1              >= 1.8 (unstructured and 8x8)
    sprig bf16 over PyTorch bf16 autocast     >= 2 at each thread count (unstructured and 8x8)
    sprig bf16 over sprig fp32                >= 1.6 at each thread count (against the
                                              unstructured fp32 step, and 8x8 against 8x8)

Without PyTorch in this Python (or with --no-torch) only the sprig-against-sprig ratios are
reported, and the others say so. The table names the CPU and whether it has AMX and
AVX512-BF16: the issues ask for the PyTorch-bf16 ratio on a CPU with AMX, and a ratio measured
elsewhere is not that one. --csv writes one row per (round, implementation, threads) step time.
Exit status 0 whether or not the bars hold; nonzero only when a run fails.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpt_torch import CONFIGS, cpu_name  # noqa: E402  (stdlib-only at import)

SPRIG_VARIANTS = ("all/8x8/bf16", "all/bf16", "all/8x8", "all")
TORCH_IMPLS = ("torch-dense-bf16", "torch-dense")

# (label, slow, fast, bar) per ratio: time(slow) / time(fast), how many times faster the step
# the bar wants ahead (fast) is; slow and fast are (implementation, threads) keys.
def threads_label(t: int) -> str:
    return f"{t} thread" + ("" if t == 1 else "s")


def bars(threads: list[int]) -> list[tuple[str, tuple[str, int], tuple[str, int], float]]:
    out = []
    one = min(threads)
    out.append((f"unstructured fp32 vs PyTorch fp32, {threads_label(one)}", ("torch-dense", one), ("all", one), 2.5))
    out.append((f"8x8 fp32 vs PyTorch fp32, {threads_label(one)}", ("torch-dense", one), ("all/8x8", one), 3.2))
    for t in threads:
        if t != one:
            out.append((f"unstructured fp32, {t} threads over {one}", ("all", one), ("all", t), 1.8))
            out.append((f"8x8 fp32, {t} threads over {one}", ("all/8x8", one), ("all/8x8", t), 1.8))
    for t in threads:
        out.append((f"unstructured bf16 vs PyTorch bf16, {threads_label(t)}", ("torch-dense-bf16", t), ("all/bf16", t), 2.0))
        out.append((f"8x8 bf16 vs PyTorch bf16, {threads_label(t)}", ("torch-dense-bf16", t), ("all/8x8/bf16", t), 2.0))
    for t in threads:
        out.append((f"unstructured bf16 vs own unstructured fp32, {threads_label(t)}", ("all", t), ("all/bf16", t), 1.6))
        out.append((f"8x8 bf16 vs own unstructured fp32, {threads_label(t)}", ("all", t), ("all/8x8/bf16", t), 1.6))
        out.append((f"8x8 bf16 vs own 8x8 fp32, {threads_label(t)}", ("all/8x8", t), ("all/8x8/bf16", t), 1.6))
    return out


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def run(cmd: list[str], what: str) -> None:
    print(f"  {what} ...", file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
        raise SystemExit(f"gpt_bars: {what} failed (exit {p.returncode}): {' '.join(cmd)}")


def sprig_round(args, threads: list[int], tmp: str) -> dict[tuple[str, int], float]:
    cfg = CONFIGS[args.config]
    out = os.path.join(tmp, "gpt_step.csv")
    cmd = [os.path.join(args.build, "bench", "gpt_step"), "--variants", *SPRIG_VARIANTS, "--threads",
           *map(str, threads), "--warmup", str(args.warmup), "--steps", str(args.steps), "--profile", "",
           "--layers", str(cfg["layers"]), "--heads", str(cfg["heads"]), "--d-model", str(cfg["d_model"]),
           "--d-ff", str(cfg["d_ff"]), "--block", str(cfg["block"]), "--batch", str(cfg["batch"]), "--csv", out]
    run(cmd, "gpt_step")
    got = {}
    with open(out, newline="") as f:
        for r in csv.DictReader(f):
            if r["kind"] == "step":
                got[(r["variant"], int(r["threads"]))] = float(r["median_ms"])
    return got


def torch_round(args, threads: list[int], tmp: str) -> dict[tuple[str, int], float]:
    out = os.path.join(tmp, "gpt_torch.csv")
    cmd = [sys.executable, os.path.join(HERE, "gpt_torch.py"), "time", "--config", args.config, "--impls",
           ",".join(TORCH_IMPLS), "--threads", ",".join(map(str, threads)), "--steps", str(args.steps), "--warmup",
           str(args.warmup), "--csv", out]
    run(cmd, "gpt_torch.py time")
    got = {}
    with open(out, newline="") as f:
        for r in csv.DictReader(f):
            got[(r["impl"], int(r["threads"]))] = float(r["median_ms"])
    return got


def has_torch() -> bool:
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build/dev", help="a build with bench/gpt_step (default build/dev)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="mini40m")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated (the smallest is the base)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per run (median)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-torch", action="store_true", help="time sprig only")
    ap.add_argument("--csv", help="write round,impl,threads,median_ms rows here")
    args = ap.parse_args()
    threads = sorted({int(t) for t in args.threads.split(",")})
    if args.rounds < 1 or args.steps < 1 or args.warmup < 1 or min(threads) < 1:
        raise SystemExit("gpt_bars: --rounds, --steps, --warmup and the thread counts at least 1")
    if not os.access(os.path.join(args.build, "bench", "gpt_step"), os.X_OK):
        raise SystemExit(f"gpt_bars: no {args.build}/bench/gpt_step (build it: cmake --build {args.build} "
                         "--target gpt_step)")
    torch_ok = not args.no_torch and has_torch()

    rounds: list[dict[tuple[str, int], float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            print(f"round {i + 1} of {args.rounds}", file=sys.stderr, flush=True)
            got = sprig_round(args, threads, tmp)
            if torch_ok:
                got.update(torch_round(args, threads, tmp))
            rounds.append(got)

    flags = cpu_flags()
    cfg = CONFIGS[args.config]
    print(f"# GPT step bars: {args.config} (layers {cfg['layers']}, d_model {cfg['d_model']}, d_ff {cfg['d_ff']}, "
          f"batch {cfg['batch']} x {cfg['block']}), attention 70% + FFN 90% sparse\n")
    print(f"CPU: {cpu_name()}; AMX: {'yes' if 'amx_bf16' in flags else 'no'}; AVX512-BF16: "
          f"{'yes' if 'avx512_bf16' in flags else 'no'}. {args.rounds} rounds, each gpt_step then "
          f"{'gpt_torch.py time' if torch_ok else 'no PyTorch (not run)'}; median of {args.steps} steps after "
          f"{args.warmup} warm-up.\n")
    keys = [(v, t) for v in SPRIG_VARIANTS for t in threads]
    if torch_ok:
        keys += [(v, t) for v in TORCH_IMPLS for t in threads]
    head = " | ".join(f"round {i + 1}" for i in range(args.rounds))
    print(f"| ms per step | threads | {head} | median |\n|---|---|" + "---|" * (args.rounds + 1))
    for k in keys:
        ms = [r[k] for r in rounds]
        print(f"| {k[0]} | {k[1]} | " + " | ".join(f"{m:.1f}" for m in ms) + f" | {statistics.median(ms):.1f} |")
    print(f"\n| ratio (times faster) | bar | {head} | median | held in |\n|---|---|" + "---|" * (args.rounds + 2))
    for label, slow, fast, bar in bars(threads):
        if not all(slow in r and fast in r for r in rounds):
            print(f"| {label} | {bar} | " + " | ".join("-" for _ in rounds) + " | not run (no PyTorch) | - |")
            continue
        ratios = [r[slow] / r[fast] for r in rounds]
        held = sum(x >= bar for x in ratios)
        print(f"| {label} | {bar} | " + " | ".join(f"{x:.2f}" for x in ratios) +
              f" | {statistics.median(ratios):.2f} | {held} of {len(ratios)} |")

    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["round", "impl", "threads", "median_ms"])
            for i, r in enumerate(rounds):
                for (impl, t), ms in sorted(r.items()):
                    w.writerow([i + 1, impl, t, f"{ms:.3f}"])


if __name__ == "__main__":
    main()
