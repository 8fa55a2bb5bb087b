"""sprig's safetensors files against PyTorch and the Python safetensors package (issue 45).

Optional tooling: nothing in the library, its tests or its CMake build depends on Python.

  (a) sprig -> PyTorch: char_gpt's dense export (trained here for --steps steps, or --dense FILE)
      loads into gpt_torch.py's model with load_state_dict(strict=True); its logits on the
      validation windows char_gpt wrote with --dump-logits match char_gpt's.
  (b) PyTorch -> sprig: a gpt_torch.py model trained here for --steps steps and saved with
      safetensors.torch.save_file imports into char_gpt (--import --eval-only --dump-logits),
      whose logits on those windows match PyTorch's.
  (c) The compressed form: char_gpt's compressed (sparse-bitmask) export of a sparse model,
      loaded with safetensors.numpy and decompressed here (numpy.unpackbits, little bit order),
      equals bit for bit the dense form char_gpt writes of the same weights; every dense
      tensor too; and gpt_torch.py on the decompressed weights gives char_gpt's logits.
  (d) BF16: (a)'s weights exported with --export-dtype bf16 load with safetensors.torch as
      torch.bfloat16 tensors, each bit for bit PyTorch's own rounding of the F32 export
      (.to(torch.bfloat16)); gpt_torch.py on them gives the logits of char_gpt importing that
      file. Skipped, saying so, when the char_gpt given has no --export-dtype.
Logits are compared as max |sprig - torch| / max |torch| over the whole [windows, block, vocab]
tensor (fp32, one thread each); the bar is 1e-5.

  python3 bench/compare_python/safetensors_check.py --char-gpt build/dev/examples/char_gpt
        [--config small] [--steps 30] [--dense FILE] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

BAR = 1e-5


def char_gpt(args, *options) -> str:
    cmd = [args.char_gpt, "--config", args.config, "--threads", "1", "--sample", "0", "--data", args.data,
           *[str(o) for o in options]]
    print("  $ " + " ".join(cmd[1:]), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"char_gpt failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def relative_error(torch, ours, theirs) -> float:
    return ((ours - theirs).abs().max() / theirs.abs().max()).item()


def torch_logits(torch, model, tokens):
    model.eval()
    with torch.no_grad():
        return model(tokens.to(torch.int64))


def compare_logits(torch, model, logits_file: str, what: str) -> float:
    from safetensors.torch import load_file
    dumped = load_file(logits_file)
    ours = torch_logits(torch, model, dumped["tokens"])
    err = relative_error(torch, dumped["logits"], ours)
    n, block, vocab = dumped["logits"].shape
    print(f"{what}: {n} windows x {block} tokens x {vocab} logits; max |sprig - torch| / max |torch| = {err:.2e} "
          f"({'within' if err <= BAR else 'NOT within'} {BAR:g})", flush=True)
    return err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--char-gpt", required=True, help="the char_gpt executable")
    ap.add_argument("--data", default=os.path.join(REPO, "examples", "data", "tinyshakespeare.txt"))
    ap.add_argument("--config", default="small", choices=["small", "mini40m"])
    ap.add_argument("--steps", type=int, default=30, help="training steps of the models made here")
    ap.add_argument("--dense", help="a dense char_gpt export of --config to check in (a) instead of training one")
    ap.add_argument("--work", help="directory for the files (default: a temporary one)")
    args = ap.parse_args()
    args.char_gpt = os.path.abspath(args.char_gpt)

    import torch
    from safetensors.numpy import load_file as load_numpy
    from safetensors.torch import load_file, save_file
    import numpy as np
    import gpt_torch

    torch.set_num_threads(1)
    torch.manual_seed(1)
    work = args.work or tempfile.mkdtemp(prefix="safetensors_check_")
    os.makedirs(work, exist_ok=True)
    cfg = dict(gpt_torch.CONFIGS[args.config])
    alphabet, train, _ = gpt_torch.load_text(torch, args.data)
    vocab = len(alphabet)

    def torch_model():
        return gpt_torch.build_model(torch, cfg, vocab, lambda kind, l, i, o: torch.nn.Linear(i, o, bias=True))

    failures = []
    # (a) sprig -> PyTorch
    print("(a) sprig's dense export into gpt_torch.py", flush=True)
    dense = args.dense
    a_logits = os.path.join(work, "a_logits.safetensors")
    if dense:
        char_gpt(args, "--import", dense, "--eval-only", "--dump-logits", a_logits)
    else:
        dense = os.path.join(work, "a_dense.safetensors")
        char_gpt(args, "--steps", args.steps, "--eval-every", 0, "--export", dense, "--dump-logits", a_logits)
    model = torch_model()
    model.load_state_dict(load_file(dense), strict=True)
    if compare_logits(torch, model, a_logits, "(a) sprig export, PyTorch load") > BAR:
        failures.append("(a)")

    # (b) PyTorch -> sprig
    print("(b) a PyTorch model saved with safetensors.torch.save_file into char_gpt", flush=True)
    model = torch_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    gen = torch.Generator().manual_seed(7)
    for _ in range(args.steps):
        starts = torch.randint(len(train) - cfg["block"], (cfg["batch"],), generator=gen).tolist()
        x, y = gpt_torch.windows(torch, train, starts, cfg["block"])
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"  trained {args.steps} steps in PyTorch, last training loss {loss.item():.4f}", flush=True)
    b_model = os.path.join(work, "b_torch.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, b_model)
    b_logits = os.path.join(work, "b_logits.safetensors")
    char_gpt(args, "--import", b_model, "--eval-only", "--dump-logits", b_logits)
    if compare_logits(torch, model, b_logits, "(b) PyTorch save, sprig import") > BAR:
        failures.append("(b)")

    # (c) the compressed form, decompressed here
    print("(c) char_gpt's compressed export (attention 70%, FFN 90%) decompressed with numpy", flush=True)
    sparse = ["--attn-sparsity", 0.7, "--ffn-sparsity", 0.9]
    c_file = os.path.join(work, "c_compressed.safetensors")
    c_dense = os.path.join(work, "c_dense.safetensors")
    c_logits = os.path.join(work, "c_logits.safetensors")
    char_gpt(args, *sparse, "--algorithm", "rigl", "--delta-t", 10, "--steps", args.steps, "--eval-every", 0,
             "--export", c_file, "--export-form", "compressed", "--dump-logits", c_logits)
    char_gpt(args, *sparse, "--import", c_file, "--eval-only", "--export", c_dense)
    packed = load_numpy(c_file)
    reference = load_numpy(c_dense)
    from safetensors import safe_open
    with safe_open(c_file, framework="numpy") as f:
        config = json.loads(f.metadata()["sparsity_config"])
    decompressed = {}
    for name in reference:
        if name + ".bitmask" in packed:
            rows, cols = (int(v) for v in packed[name + ".shape"])
            mask = np.unpackbits(packed[name + ".bitmask"], axis=-1, bitorder="little")[:, :cols].astype(bool)
            offsets = np.concatenate([[0], np.cumsum(mask.sum(axis=1))[:-1]])
            if not np.array_equal(offsets, packed[name + ".row_offsets"]):
                failures.append(f"(c) {name}.row_offsets")
            w = np.zeros((rows, cols), dtype=packed[name + ".compressed"].dtype)
            w[mask] = packed[name + ".compressed"]  # row-major, columns ascending
            decompressed[name] = w
        else:
            decompressed[name] = packed[name]
    extra = set(packed) - {n + s for n in reference for s in ("", ".shape", ".compressed", ".bitmask", ".row_offsets")}
    if extra:
        failures.append(f"(c) unexpected tensors {sorted(extra)}")
    differ = [n for n in reference if decompressed[n].dtype != reference[n].dtype
              or decompressed[n].shape != reference[n].shape
              or not np.array_equal(decompressed[n].view(np.uint32), reference[n].view(np.uint32))]
    sparse_names = [n for n in reference if n + ".bitmask" in packed]
    live = sum(int(packed[n + ".compressed"].size) for n in sparse_names)
    total = sum(int(reference[n].size) for n in sparse_names)
    print(f"  {len(sparse_names)} sparse weights (sparsity_config targets {len(config['targets'])}, format "
          f"{config['format']}), {live} of {total} entries live ({100 * (1 - live / total):.1f}% sparse); "
          f"{len(reference) - len(differ)} of {len(reference)} tensors bit for bit equal to char_gpt's dense form "
          f"{'(all)' if not differ else 'DIFFER: ' + ', '.join(differ)}", flush=True)
    if differ or config["format"] != "sparse-bitmask" or sorted(config["targets"]) != sorted(sparse_names):
        failures.append("(c) decompression")
    model = torch_model()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in decompressed.items()}, strict=True)
    if compare_logits(torch, model, c_logits, "(c) compressed export, decompressed, PyTorch logits") > BAR:
        failures.append("(c) logits")
    # (d) BF16
    print("(d) char_gpt's dense export in BF16 into PyTorch", flush=True)
    d_file = None
    if "--export-dtype" not in subprocess.run([args.char_gpt, "--help"], capture_output=True, text=True).stdout:
        print("  skipped: this char_gpt has no --export-dtype", flush=True)
    else:
        d_file = os.path.join(work, "d_bf16.safetensors")
        d_logits = os.path.join(work, "d_logits.safetensors")
        char_gpt(args, "--import", dense, "--eval-only", "--export", d_file, "--export-dtype", "bf16")
        char_gpt(args, "--import", d_file, "--eval-only", "--dump-logits", d_logits)
        bf16, f32 = load_file(d_file), load_file(dense)
        not_bf16 = sorted(n for n, t in bf16.items() if t.dtype != torch.bfloat16)
        differ = sorted(n for n in f32 if n not in bf16 or bf16[n].shape != f32[n].shape
                        or not torch.equal(bf16[n].view(torch.int16), f32[n].to(torch.bfloat16).view(torch.int16)))
        extra = sorted(set(bf16) - set(f32))
        print(f"  {len(bf16)} tensors, {len(bf16) - len(not_bf16)} of them torch.bfloat16; "
              f"{len(f32) - len(differ)} of {len(f32)} bit for bit torch's rounding of the F32 export "
              f"{'(all)' if not differ else 'DIFFER: ' + ', '.join(differ)}"
              f"{'; unexpected tensors ' + ', '.join(extra) if extra else ''}", flush=True)
        if not_bf16 or differ or extra:
            failures.append("(d) values")
        model = torch_model()
        model.load_state_dict(bf16, strict=True)  # widened exactly into the float32 parameters
        if compare_logits(torch, model, d_logits, "(d) BF16 export, PyTorch load vs sprig import") > BAR:
            failures.append("(d) logits")
    sizes = {os.path.basename(p): os.path.getsize(p) for p in (dense, c_file, c_dense, d_file) if p}
    print("file sizes: " + ", ".join(f"{k} {v} bytes" for k, v in sizes.items()))
    print("torch " + torch.__version__ + "; files in " + work)
    if failures:
        raise SystemExit("FAILED: " + ", ".join(failures))
    print("all checks passed")


if __name__ == "__main__":
    main()
