#!/usr/bin/env bash
# The small-config comparison of char_gpt (issue table of the README): trains, for the same
# steps and seed(s),
#   dense                      every projection dense
#   ffn90_{static,rigl}        FFN 90% sparse, attention dense
#   all_{static,rigl}_s<seed>  attention 70% + FFN 90% sparse, seeds 1 and 2
#   wide_rigl                  d_model 512, d_ff 2048, attention and FFN 75% sparse: as
#                              many live projection weights as the dense small model
#   all_{static,rigl}_b{4x4,8x8}   as all_*_s1 with every projection in dense 4x4 or 8x8
#                              blocks (--weight-blocks; DST on the block grid); not in the
#                              default order, name them in RUNS
#   sparser_static[_b4x4|_b8x8]    attention 90% + FFN 95% sparse, fixed topology, seed 1,
#                              unstructured or in blocks (RUNS only)
#   dense_bf16, all_{rigl,static}_bf16_s1   as dense and all_*_s1 with bf16 products in the
#                              projections (--precision bf16); RUNS only
#   torch_dense, torch_all_static   the same model in PyTorch (bench/compare_python/gpt_torch.py),
#                              dense and with static random masks, when torch is installed
# and writes
#   examples/results/char_gpt/<run>.log / .csv   each run's output and curve
#   examples/results/char_gpt/small.md           table: validation loss at equal steps and at
#                                                equal wall-clock time, ms/step, weight memory
#   examples/results/char_gpt/small.png          validation loss against step and against time
#
# Usage: examples/char_gpt_compare.sh [BUILD_DIR] [extra char_gpt options...]
# Environment: PYTHON (default python3) the interpreter with torch; TABLE_ONLY=1 skips the
# training runs and remakes the table from the logs and curves in OUT (REUSE_TIMING=1: and
# the step times in OUT/step_ms.txt); JOBS (default 2) runs at a time, each on THREADS (default 1) threads; RUNS
# (default all) a space-separated subset of the run names; STEPS (default 2000); EVAL_EVERY
# (default 100) steps between validations; OUT (default examples/results/char_gpt) the output folder.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build}"
shift || true
[[ "$build" = /* ]] || build="$root/$build"
exe="$build/examples/char_gpt"
[[ -x "$exe" ]] || { echo "char_gpt_compare: $exe not found (cmake --build $build --target char_gpt)" >&2; exit 1; }
out="${OUT:-$root/examples/results/char_gpt}"
mkdir -p "$out"
jobs="${JOBS:-2}"
threads="${THREADS:-1}"
steps="${STEPS:-2000}"
eval_every="${EVAL_EVERY:-100}"
common=(--config small --steps "$steps" --eval-every "$eval_every" --threads "$threads" --sample 200 "$@")
timing_common=(--config small --threads "$threads" "$@")

declare -A args=(
  [dense]=""
  [ffn90_static]="--ffn-sparsity 0.9 --algorithm static"
  [ffn90_rigl]="--ffn-sparsity 0.9 --algorithm rigl"
  [all_static_s1]="--attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm static --seed 1"
  [all_static_s2]="--attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm static --seed 2"
  [all_rigl_s1]="--attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm rigl --seed 1"
  [all_rigl_s2]="--attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm rigl --seed 2"
  [wide_rigl]="--d-model 512 --d-ff 2048 --attn-sparsity 0.75 --ffn-sparsity 0.75 --algorithm rigl"
  [all_static_b4x4]="--attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm static --seed 1 --weight-blocks 4x4"
  [all_rigl_b4x4]="--attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm rigl --seed 1 --weight-blocks 4x4"
  [all_static_b8x8]="--attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm static --seed 1 --weight-blocks 8x8"
  [all_rigl_b8x8]="--attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm rigl --seed 1 --weight-blocks 8x8"
  [sparser_static]="--attn-sparsity 0.9 --ffn-sparsity 0.95 --algorithm static --seed 1"
  [sparser_static_b4x4]="--attn-sparsity 0.9 --ffn-sparsity 0.95 --algorithm static --seed 1 --weight-blocks 4x4"
  [sparser_static_b8x8]="--attn-sparsity 0.9 --ffn-sparsity 0.95 --algorithm static --seed 1 --weight-blocks 8x8"
  [dense_bf16]="--precision bf16"
  [all_rigl_bf16_s1]="--attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm rigl --seed 1 --precision bf16"
  [all_static_bf16_s1]="--attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm static --seed 1 --precision bf16"
)
order=(dense ffn90_static ffn90_rigl all_static_s1 all_static_s2 all_rigl_s1 all_rigl_s2 wide_rigl)
torch_script="$root/bench/compare_python/gpt_torch.py"
have_torch=0
python="${PYTHON:-python3}"
if [[ -f "$torch_script" ]] && "$python" -c "import torch" 2>/dev/null; then have_torch=1; order+=(torch_dense torch_all_static); fi
[[ -n "${RUNS:-}" ]] && read -r -a order <<<"$RUNS"

run_one() {
  local name="$1"
  echo "char_gpt_compare: $name ..." >&2
  case "$name" in
    torch_dense)
      "$python" "$torch_script" train --steps "$steps" --eval-every "$eval_every" --threads "$threads" --csv "$out/$name.csv" \
        >"$out/$name.log" 2>&1 ;;
    torch_all_static)
      "$python" "$torch_script" train --steps "$steps" --eval-every "$eval_every" --threads "$threads" --attn-sparsity 0.7 \
        --ffn-sparsity 0.9 --csv "$out/$name.csv" >"$out/$name.log" 2>&1 ;;
    *)
      # shellcheck disable=SC2086
      "$exe" "${common[@]}" ${args[$name]} --csv "$out/$name.csv" >"$out/$name.log" 2>"$out/$name.progress" ;;
  esac || { echo "char_gpt_compare: $name failed: $(tail -2 "$out/$name.log" "$out/$name.progress" 2>/dev/null)" >&2; return 1; }
  grep -q '^RESULT ' "$out/$name.log" || { echo "char_gpt_compare: $name printed no RESULT line" >&2; return 1; }
  echo "char_gpt_compare: $name: $(grep '^RESULT ' "$out/$name.log")" >&2
}

pids=()
[[ "${TABLE_ONLY:-0}" == 1 ]] || for name in "${order[@]}"; do
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n; done
  run_one "$name" &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
(( failed == 0 )) || { echo "char_gpt_compare: a run failed" >&2; exit 1; }

# Step times, measured apart: each configuration alone on the machine for TIMING_STEPS
# (default 30) steps on THREADS threads, one after the other (runs that share the machine
# time each other, not themselves). The time axis of the table and plot is step x this.
timing_steps="${TIMING_STEPS:-30}"
# REUSE_TIMING=1 keeps the step times of an earlier call (OUT/step_ms.txt).
[[ "${REUSE_TIMING:-0}" == 1 && -s "$out/step_ms.txt" ]] || : >"$out/step_ms.txt"
[[ "${REUSE_TIMING:-0}" == 1 && -s "$out/step_ms.txt" ]] || for name in "${order[@]}"; do
  case "$name" in
    torch_dense) line="$("$python" "$torch_script" train --steps "$timing_steps" --eval-every "$timing_steps" --threads "$threads" 2>/dev/null | grep '^RESULT ')" ;;
    torch_all_static) line="$("$python" "$torch_script" train --steps "$timing_steps" --eval-every "$timing_steps" --threads "$threads" \
                               --attn-sparsity 0.7 --ffn-sparsity 0.9 2>/dev/null | grep '^RESULT ')" ;;
    # shellcheck disable=SC2086
    *) line="$("$exe" "${timing_common[@]}" ${args[$name]} --steps "$timing_steps" --eval-every 0 --sample 0 2>/dev/null | grep '^RESULT ')" ;;
  esac
  echo "$name $(sed -E 's/.*ms_per_step=([^ ]+).*/\1/' <<<"$line")" >>"$out/step_ms.txt"
  echo "char_gpt_compare: $name alone: $(tail -1 "$out/step_ms.txt") ms/step" >&2
done

# Table: the final validation loss, and the loss at the time the fastest configuration
# needs for all its steps (time = step x its ms/step measured alone; linear interpolation
# along each curve).
cpu="$(lscpu | sed -nE 's/^Model name: *//p' | head -1), family $(lscpu | sed -nE 's/^CPU family: *//p'), model $(lscpu | sed -nE 's/^Model: *//p')"
python3 - "$out" "$cpu" "$steps" "$threads" "$jobs" "${order[@]}" <<'PY'
import csv, os, re, sys
out, cpu, steps, threads, jobs, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
ms = dict(l.split() for l in open(f"{out}/step_ms.txt") if len(l.split()) == 2)
runs = {}
for n in names:
    rows = list(csv.DictReader(open(f"{out}/{n}.csv")))
    res = dict(kv.split("=", 1) for kv in re.search(r"^RESULT (.*)$", open(f"{out}/{n}.log").read(), re.M).group(1).split())
    runs[n] = ([(int(r["step"]), float(r["val_loss"]), int(r["step"]) * float(ms[n]) / 1e3) for r in rows if r["val_loss"] not in ("", "nan")], res)
t_eq = min(c[-1][2] for c, _ in runs.values())
def at_time(curve, t):
    prev = (0, float("nan"), 0.0)
    for p in curve:
        if p[2] >= t:
            if prev[2] == 0.0 or p[2] == prev[2]: return p[1]
            w = (t - prev[2]) / (p[2] - prev[2]); return prev[1] + w * (p[1] - prev[1])
        prev = p
    return curve[-1][1]
with open(f"{out}/small.md", "w") as f:
    f.write(f"# char_gpt, small config: validation loss at equal steps and at equal time\n\n")
    f.write(f"CPU: {cpu}. {steps} steps, batch 16 x 128 tokens, {threads} thread(s) per run, {jobs} run(s) at a time.\n")
    subset = f' RUNS="{" ".join(names)}"' if os.environ.get("RUNS") else ""
    f.write(f"Command: `examples/char_gpt_compare.sh` (JOBS={jobs} THREADS={threads} STEPS={steps}{subset}).\n")
    f.write(f"Time = step x the configuration's ms/step measured alone ({threads} thread(s)); equal time = {t_eq:.0f} s, the fastest configuration's whole run.\n\n")
    f.write("| run | val loss at step " + steps + f" | val loss at {t_eq:.0f} s | ms/step | weight bytes | of dense |\n|---|---|---|---|---|---|\n")
    for n, (c, r) in runs.items():
        wb, db = r.get("weight_bytes"), r.get("dense_weight_bytes")  # torch runs print params instead
        frac = f"{100*int(wb)/int(db):.1f}%" if wb and db else "-"
        f.write(f"| {n} | {c[-1][1]:.4f} | {at_time(c, t_eq):.4f} | {float(ms[n]):.1f} | {wb or '-'} | {frac} |\n")
    pairs = [(f"all_rigl_s{s}", f"all_static_s{s}") for s in (1, 2)]
    if all(a in runs and b in runs for a, b in pairs):
        d = sum(runs[b][0][-1][1] - runs[a][0][-1][1] for a, b in pairs) / 2
        f.write(f"\nAll-sparse, mean of 2 seeds: Static - RigL = {d:+.4f} nats at step {steps}.\n")
for n, (c, _) in runs.items():
    with open(f"{out}/{n}.dat", "w") as g:
        for s, v, t in c: g.write(f"{s} {v} {t}\n")
print(open(f"{out}/small.md").read())
PY

if command -v gnuplot >/dev/null; then
  plots_step="" plots_time=""
  for n in "${order[@]}"; do
    plots_step+="'$out/$n.dat' using 1:2 with lines title '$n', "
    plots_time+="'$out/$n.dat' using 3:2 with lines title '$n', "
  done
  gnuplot <<GP
set terminal pngcairo size 1400,560 noenhanced
set output '$out/small.png'
set multiplot layout 1,2
set ylabel 'validation loss (nats)'
set yrange [1.4:2.6]
set key top right
set xlabel 'step'
plot ${plots_step%, }
set xlabel 'training time (s)'
plot ${plots_time%, }
unset multiplot
GP
  echo "char_gpt_compare: wrote $out/small.md and $out/small.png" >&2
else
  echo "char_gpt_compare: gnuplot not found: wrote $out/small.md only" >&2
fi
