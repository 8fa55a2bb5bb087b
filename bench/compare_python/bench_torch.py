"""PyTorch dense nn.Linear training step (one configuration per process).

Run by run.sh with OMP_NUM_THREADS set; prints one 'RESULT {json}' line.
"""
from __future__ import annotations

import step_common as sc


def main() -> None:
    args = sc.parse_args("time one PyTorch dense training step")
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y, loss_fn = sc.make_data(torch, args.model, args.batch, args.seed)
    model = sc.build(torch, args.model, lambda i, o: torch.nn.Linear(i, o))
    step = sc.sgd_step(torch, model, x, y, loss_fn)

    for _ in range(args.warmup):
        step()
    times = sc.time_steps(step, args.steps)
    sc.report(args, "torch-dense", times, extra={
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "mkl": bool(torch.backends.mkl.is_available()), "mkldnn": bool(torch.backends.mkldnn.is_available()),
    })


if __name__ == "__main__":
    main()
