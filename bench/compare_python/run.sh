#!/usr/bin/env bash
# Times one training step with PyTorch dense nn.Linear and with sparselab 0.2.2 SparseLinear
# (+ its SET), runs sprig's bench/train_step --csv in the same script, and prints one table.
# Optional tooling: nothing in the library or its tests depends on it. See docs/performance.md.
#
# Environment (all optional):
#   SPRIG_BUILD_DIR    build directory holding bench/train_step (default: <repo>/build-step);
#                      configured and built here if the binary is missing
#   SPRIG_BENCH_VENV   virtual environment (default: $SPRIG_BUILD_DIR/pyvenv); created and
#                      filled from PyPI (torch, sparselab==0.2.2, numpy) if missing
#   OUT                output folder (default: $SPRIG_BUILD_DIR/compare_python)
#   THREADS  MODELS  SPARSITIES  STEPS  WARMUP  DELTA_T  SET_UPDATES   (defaults below)
#   SKIP_SPRIG=1       reuse $OUT/sprig.csv instead of running train_step again
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BUILD="${SPRIG_BUILD_DIR:-$REPO/build-step}"
VENV="${SPRIG_BENCH_VENV:-$BUILD/pyvenv}"
OUT="${OUT:-$BUILD/compare_python}"
THREADS="${THREADS:-1 2}"
MODELS="${MODELS:-mlp ffn}"
SPARSITIES="${SPARSITIES:-0.8 0.9 0.95 0.98}"
STEPS="${STEPS:-30}"
WARMUP="${WARMUP:-5}"
DELTA_T="${DELTA_T:-100}"
SET_UPDATES="${SET_UPDATES:-3}"
mkdir -p "$OUT"
# OpenBLAS picks its kernels for this CPU unless OPENBLAS_CORETYPE overrides it; some machines
# set it (with OPENBLAS_L2_SIZE) system-wide for old OpenBLAS builds, which can hand the dense
# baseline slower kernels (Haswell instead of Cooperlake on a Zen 5: the dense MLP step 11.4
# instead of 6.3 ms). Benchmark against OpenBLAS's own choice; train_step's header names the
# kernel family that ran.
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree

# 1. Python environment (PyPI only: the CPU-only torch index is not reachable here, so the
#    default torch wheel is installed; it is large because it pulls CUDA libraries).
if ! "$VENV/bin/python" -c "import torch, sparselab" 2>/dev/null; then
  python3 -m venv "$VENV" || { echo "python3 -m venv failed: apt-get install python3-venv" >&2; exit 1; }
  "$VENV/bin/pip" install --upgrade pip
  "$VENV/bin/pip" install torch "sparselab==0.2.2" numpy
fi
PY="$VENV/bin/python"
"$PY" -c "import torch, sparselab; print('torch', torch.__version__, '| sparselab', sparselab.__version__)"

# 2. sprig's numbers, same shapes, batch and threads.
csv_list() { echo "$*" | tr ' ' ','; }
if [[ "${SKIP_SPRIG:-0}" != 1 ]]; then
  # configured once, rebuilt (incrementally) every time: the table must be of this source tree
  [[ -f "$BUILD/CMakeCache.txt" ]] || cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build "$BUILD" --target train_step -j 2
  "$BUILD/bench/train_step" --csv --threads "$(csv_list $THREADS)" --models "$(csv_list $MODELS)" \
    --sparsities "0,$(csv_list $SPARSITIES)" --delta-t "$DELTA_T" --set-updates "$SET_UPDATES" \
    --md "$OUT/sprig.md" > "$OUT/sprig.csv"
fi

# 3. PyTorch dense and sparselab, one process per configuration (OMP_NUM_THREADS also reaches
#    sparselab's bundled libgomp; torch.set_num_threads is called too).
: > "$OUT/python.jsonl"
common=(--steps "$STEPS" --warmup "$WARMUP" --delta-t "$DELTA_T" --set-updates "$SET_UPDATES")
for t in $THREADS; do
  for m in $MODELS; do
    echo "torch dense: $m, $t thread(s)" >&2
    OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t "$PY" "$HERE/bench_torch.py" --model "$m" --threads "$t" "${common[@]}" \
      | grep '^RESULT ' | cut -c8- >> "$OUT/python.jsonl"
    for s in $SPARSITIES; do
      echo "sparselab: $m, sparsity $s, $t thread(s)" >&2
      OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t "$PY" -W ignore "$HERE/bench_sparselab.py" --model "$m" --sparsity "$s" \
        --threads "$t" "${common[@]}" | grep '^RESULT ' | cut -c8- >> "$OUT/python.jsonl"
    done
  done
done

# 4. One table, with the load average (another process on a core wrecks 2-thread numbers).
{
  "$PY" "$HERE/report.py" "$OUT/sprig.csv" "$OUT/python.jsonl" "$OUT/python.csv"
  echo
  echo "Load average at the end of the Python runs: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores."
} | tee "$OUT/comparison.md"
