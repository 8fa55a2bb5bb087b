"""sparselab 0.2.2 SparseLinear training step with its SET (one configuration per process).

Hidden layers are sparselab.SparseLinear(sparsity=s) (the MLP's output layer stays
nn.Linear, as in sprig); SET(sparsity=s, drop_fraction=0.3, update_freq=delta_t) is
attached with model.apply and driven by algo.step() after opt.step(), as sparselab's README
shows. The steady step is timed on non-update steps; the topology update is timed by calling
algo.update() directly (what algo.step() does every delta_t steps), plus the extra time of
the first step after it (sparselab rebuilds its cached transposes then), and amortised over
delta_t. Run by run.sh with OMP_NUM_THREADS set (sparselab bundles its own libgomp, which
reads it); prints one 'RESULT {json}' line.
"""
from __future__ import annotations

import statistics
import time

import step_common as sc


def main() -> None:
    args = sc.parse_args("time one sparselab training step")
    import torch
    import sparselab

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y, loss_fn = sc.make_data(torch, args.model, args.batch, args.seed)
    model = sc.build(torch, args.model, lambda i, o: sparselab.SparseLinear(i, o, sparsity=args.sparsity))
    algo = sparselab.SET(sparsity=args.sparsity, drop_fraction=0.3, update_freq=args.delta_t, seed=args.seed)
    model.apply(algo)
    step = sc.sgd_step(torch, model, x, y, loss_fn)

    for _ in range(args.warmup):
        step()
    times = sc.time_steps(step, args.steps)  # no algo.step(): steady state only
    updates, extra = [], []
    for _ in range(args.set_updates):
        t0 = time.perf_counter()
        algo.update()
        updates.append((time.perf_counter() - t0) * 1e3)
        first = sc.time_steps(step, 1)[0]
        regular = sc.time_steps(step, 3)
        extra.append(max(0.0, first - statistics.median(regular)))
    upd = statistics.median(updates) if updates else 0.0
    reb = statistics.median(extra) if extra else 0.0
    live = sum(m.nnz for m in model.modules() if isinstance(m, sparselab.SparseLinear))
    sc.report(args, "sparselab", times, upd, reb, extra={
        "sparselab": sparselab.__version__, "torch": torch.__version__, "live_sparse_weights": live,
    })


if __name__ == "__main__":
    main()
