"""The char-level GPT of examples/char_gpt, written in PyTorch (see gpt_README.md).

Optional tooling: nothing in the library, its tests or its CMake build depends on Python.

Two modes:

  train   trains the `small` config (or a wider one) on Tiny Shakespeare with char_gpt's recipe,
          dense or with STATIC random masks on the attention / FFN projections, and reports the
          validation loss on a fixed set of windows: the reference for sprig's quality.
  time    times one training step of the `mini40m` config (or `small`) for PyTorch dense
          nn.Linear, sparselab all-sparse (attention 70%, FFN 90%) and sparselab FFN-90%, each
          configuration in its own process (OMP_NUM_THREADS set there), and prints a table and
          writes a CSV: the reference for sprig's speed.

Model (both modes): token + learned positional embeddings; per block, pre-LN
    x = x + proj(attn(qkv(LN1(x))))          qkv: Linear(d, 3d) fused, rows [Q; K; V]
    x = x + fc_proj(gelu_tanh(fc(LN2(x))))   fc: Linear(d, d_ff), fc_proj: Linear(d_ff, d)
then LN_f and an untied head Linear(d, vocab) with bias. nn.LayerNorm(eps=1e-5), dropout 0,
causal attention through F.scaled_dot_product_attention(is_causal=True) (scale 1/sqrt(d/heads)),
mean cross-entropy over all B*T positions.

Recipe (train; the timed step of `time` is the same step on synthetic tokens): AdamW
betas (0.9, 0.99), eps 1e-8, weight decay 0.1 on the Linear weight matrices only (qkv, proj, fc,
fc_proj, head; not biases, layer norms or embeddings), lr 1e-3 with linear warmup over 100 steps
(lr * (t + 1) / warmup) then cosine to 1e-4 (sprig's CosineWarmupLR with total = steps:
p = (t - warmup) / (steps - warmup)), global-norm clipping at 1.0, batch 16, block 128.

Data as nanoGPT (and sprig's data/text.hpp) prepare it: tokens are bytes over the sorted distinct
bytes of the file (Tiny Shakespeare: 65); the first ceil(0.9 n) tokens train (sprig's
split_tokens; nanoGPT's int(0.9 n) is one token less), the rest validate; training windows at
starts torch.randint(n_train - block) from a seeded torch.Generator; validation on the fixed
starts s_k = floor(k * last / (count - 1)), last = n_val - block - 1, k < count (sprig's
evaluation_window_starts).

Initialisation, as char_gpt's --init: gpt2 (the default, nanoGPT's): N(0, 0.02) for every
Linear and embedding, N(0, 0.02 / sqrt(2 layers)) for proj and fc_proj, a masked weight's std
times sqrt(in / fan_in) with fan_in = live weights / rows (sprig's rule for sparse layers,
nn/init.hpp), biases 0; LayerNorm gain 1, bias 0. --init kaiming: embeddings N(0, 0.02); every
Linear weight U(-b, b), b = sqrt(6 / fan_in), biases 0 (sprig's default before 0.2.0).

Static masks (train, --attn-sparsity / --ffn-sparsity S): every qkv and proj (attention) or fc
and fc_proj (FFN) weight keeps exactly round((1 - S) * rows * cols) live weights at uniformly
random positions (torch.randperm, seeded by --seed and the layer, sprig's layer keys
2 + 4 * block + j). The gradient is masked in a hook (so clipping sees live gradients only, as
sprig's clip_grad_norm does) and the weights are masked again after every optimizer step.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_TEXT = os.path.join(REPO, "examples", "data", "tinyshakespeare.txt")

# The named configs of char_gpt (issue 22): layers, heads, d_model, d_ff, block, batch.
CONFIGS = {
    "small": dict(layers=4, heads=4, d_model=256, d_ff=1024, block=128, batch=16),
    "mini40m": dict(layers=8, heads=10, d_model=640, d_ff=2560, block=128, batch=8),
}
PROJECTIONS = ("qkv", "proj", "fc", "fc_proj")  # j of sprig's layer key 2 + 4 * block + j
ATTENTION = ("qkv", "proj")


def set_threads_env(threads: int) -> None:
    """OpenMP / MKL read these when torch loads: set them before the import."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))


def cpu_name() -> str:
    """lscpu's model name, CPU family and model, e.g. 'AMD EPYC (family 25, model 17)'."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown CPU"
    fields = {}
    for line in out.splitlines():
        k, _, v = line.partition(":")
        fields[k.strip()] = v.strip()
    return (f"{fields.get('Model name', '?')} (family {fields.get('CPU family', '?')}, "
            f"model {fields.get('Model', '?')}, {os.cpu_count()} CPUs)")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def quantile(v: list[float], q: float) -> float:
    s = sorted(v)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


def cosine_warmup_lr(t: int, lr: float, warmup: int, total: int, min_lr: float) -> float:
    """sprig's CosineWarmupLR (optim/lr_schedule.hpp), for the 0-based step t about to be taken."""
    if t < warmup:
        return lr * (t + 1) / warmup
    p = min(max((t - warmup) / (total - warmup), 0.0), 1.0)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------

def build_model(torch, cfg: dict, vocab: int, make_linear):
    """A GPT whose projections come from make_linear(kind, block, in, out); kind in PROJECTIONS."""
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self, l: int):
            super().__init__()
            d, f = cfg["d_model"], cfg["d_ff"]
            self.heads = cfg["heads"]
            self.ln1 = nn.LayerNorm(d, eps=1e-5)
            self.qkv = make_linear("qkv", l, d, 3 * d)
            self.proj = make_linear("proj", l, d, d)
            self.ln2 = nn.LayerNorm(d, eps=1e-5)
            self.fc = make_linear("fc", l, d, f)
            self.fc_proj = make_linear("fc_proj", l, f, d)

        def forward(self, x):
            B, T, C = x.shape
            h = self.heads
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q = q.view(B, T, h, C // h).transpose(1, 2)
            k = k.view(B, T, h, C // h).transpose(1, 2)
            v = v.view(B, T, h, C // h).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.proj(y)
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            d = cfg["d_model"]
            self.tok_emb = nn.Embedding(vocab, d)
            self.pos_emb = nn.Embedding(cfg["block"], d)
            self.blocks = nn.ModuleList([Block(l) for l in range(cfg["layers"])])
            self.ln_f = nn.LayerNorm(d, eps=1e-5)
            self.head = nn.Linear(d, vocab, bias=True)

        def forward(self, idx):
            T = idx.shape[1]
            pos = torch.arange(T, device=idx.device)
            x = self.tok_emb(idx) + self.pos_emb(pos)
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln_f(x))

    return GPT()


def decay_groups(torch, model, weight_decay: float):
    """AdamW groups: Linear weight matrices (and sparselab's live values) decay; nothing else."""
    decay, no_decay = [], []
    decayed = set()
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            decayed.add(id(m.weight))
        elif hasattr(m, "_values") and isinstance(getattr(m, "_values"), torch.nn.Parameter):
            decayed.add(id(m._values))  # sparselab.SparseLinear's weight
    for p in model.parameters():
        (decay if id(p) in decayed else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def exact_mask(torch, rows: int, cols: int, density: float, seed: int, key: int):
    """round(density * rows * cols) live positions, uniformly random, seeded by (seed, key)."""
    n = rows * cols
    k = int(math.floor(density * n + 0.5))
    if k < 1:
        raise ValueError(f"density {density} of a {rows}x{cols} matrix leaves no weight")
    g = torch.Generator().manual_seed(seed * 1_000_003 + key)
    mask = torch.zeros(n, dtype=torch.float32)
    mask[torch.randperm(n, generator=g)[:k]] = 1.0
    return mask.view(rows, cols)


def init_model(torch, model, cfg: dict, scheme: str, masks: dict, seed: int) -> None:
    """--init gpt2 / kaiming (module docstring); masked weights are drawn with their live fan-in."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for emb in (model.tok_emb, model.pos_emb):
            emb.weight.normal_(0.0, 0.02, generator=g)
        linears = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
        for name, m in linears:
            w = m.weight
            mask = masks.get(name)
            live = float(mask.sum()) if mask is not None else float(w.numel())
            fan_in = live / w.shape[0]
            if scheme == "kaiming":
                b = math.sqrt(6.0 / fan_in)
                w.uniform_(-b, b, generator=g)
            else:
                std = 0.02
                if name.endswith(".proj") or name.endswith(".fc_proj"):
                    std = 0.02 / math.sqrt(2 * cfg["layers"])
                w.normal_(0.0, std * math.sqrt(w.shape[1] / fan_in), generator=g)
            if m.bias is not None:
                m.bias.zero_()


def count_params(torch, model, masks: dict) -> tuple[int, int]:
    """(live parameters, dense parameters): a masked weight counts its live entries."""
    dense = sum(p.numel() for p in model.parameters())
    masked_out = sum(int(m.numel() - m.sum().item()) for m in masks.values())
    return dense - masked_out, dense


# ----------------------------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------------------------

def load_text(torch, path: str):
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise SystemExit(f"{path} is empty")
    alphabet = sorted(set(data))
    lut = bytearray(256)
    for i, b in enumerate(alphabet):
        lut[b] = i
    tokens = torch.frombuffer(bytearray(data.translate(bytes(lut))), dtype=torch.uint8).to(torch.int64)
    cut = min(len(tokens), math.ceil(0.9 * len(tokens)))
    return alphabet, tokens[:cut], tokens[cut:]


def windows(torch, tokens, starts, block: int):
    idx = torch.stack([tokens[s:s + block] for s in starts])
    tgt = torch.stack([tokens[s + 1:s + block + 1] for s in starts])
    return idx, tgt


def evaluate(torch, model, val, starts: list[int], block: int, batch: int) -> float:
    F = torch.nn.functional
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(starts), batch):
            chunk = starts[i:i + batch]
            x, y = windows(torch, val, chunk, block)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            total += loss.item() * len(chunk)  # every window has block positions
    model.train()
    return total / len(starts)


def sample(torch, model, alphabet, prompt: str, n: int, temperature: float, block: int, seed: int) -> str:
    lut = {b: i for i, b in enumerate(alphabet)}
    ids = [lut[b] for b in prompt.encode() if b in lut] or [0]
    g = torch.Generator().manual_seed(seed)
    model.eval()
    with torch.no_grad():
        for _ in range(n):
            x = torch.tensor([ids[-block:]])
            logits = model(x)[0, -1] / temperature
            ids.append(int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=g)))
    model.train()
    return bytes(alphabet[i] for i in ids).decode(errors="replace")


def cmd_train(args) -> None:
    set_threads_env(args.threads)
    import torch

    F = torch.nn.functional
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = dict(CONFIGS[args.config])
    for k in ("layers", "heads", "d_model", "d_ff", "block", "batch"):
        if getattr(args, k) is not None:
            cfg[k] = getattr(args, k)
    if cfg["d_model"] % cfg["heads"]:
        raise SystemExit(f"d_model {cfg['d_model']} is not divisible by heads {cfg['heads']}")
    for name, s in (("attn-sparsity", args.attn_sparsity), ("ffn-sparsity", args.ffn_sparsity)):
        if not 0.0 <= s < 1.0:
            raise SystemExit(f"--{name} {s} is outside [0, 1)")
    block, batch = cfg["block"], cfg["batch"]

    alphabet, train, val = load_text(torch, args.text)
    vocab = len(alphabet)
    if len(train) <= block or len(val) <= block:
        raise SystemExit(f"splits of {len(train)} / {len(val)} tokens cannot hold a window of {block}")

    masks = {}  # module name -> mask (a buffer of the same shape as the weight)

    def make_linear(kind, l, i, o):
        return torch.nn.Linear(i, o, bias=True)

    model = build_model(torch, cfg, vocab, make_linear)
    for l, blk in enumerate(model.blocks):
        for j, kind in enumerate(PROJECTIONS):
            s = args.attn_sparsity if kind in ATTENTION else args.ffn_sparsity
            if s > 0.0:
                w = getattr(blk, kind).weight
                masks[f"blocks.{l}.{kind}"] = exact_mask(torch, w.shape[0], w.shape[1], 1.0 - s, args.seed,
                                                         2 + 4 * l + j)
    init_model(torch, model, cfg, args.init, masks, args.seed)
    masked = []  # (weight, mask)
    for name, mask in masks.items():
        w = model.get_submodule(name).weight
        with torch.no_grad():
            w.mul_(mask)
        w.register_hook(lambda grad, mask=mask: grad * mask)
        masked.append((w, mask))
    live, dense = count_params(torch, model, masks)

    opt = torch.optim.AdamW(decay_groups(torch, model, args.weight_decay), lr=args.lr, betas=(0.9, 0.99),
                            eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    count = args.eval_windows
    last = len(val) - block - 1
    eval_starts = [0] * count if count == 1 else [k * last // (count - 1) for k in range(count)]

    print(f"# gpt_torch train: {cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"# config {args.config}: layers {cfg['layers']}, heads {cfg['heads']}, d_model {cfg['d_model']}, "
          f"d_ff {cfg['d_ff']}, block {block}, batch {batch}, vocab {vocab}; attention sparsity "
          f"{args.attn_sparsity:g}, FFN sparsity {args.ffn_sparsity:g} (static masks); init {args.init}; "
          f"precision {args.precision}{' (autocast)' if args.precision == 'bf16' else ''}")
    print(f"# parameters: {live} live of {dense}; train {len(train)} / val {len(val)} tokens; "
          f"{count} validation windows; {args.steps} steps", flush=True)

    rows = []
    csv_file = open(args.csv, "w", newline="") if args.csv else None
    writer = csv.writer(csv_file) if csv_file else None
    if writer:
        writer.writerow(["step", "train_loss", "val_loss", "elapsed_s", "lr"])

    def record(step: int, train_loss, elapsed: float, lr: float) -> float:
        t0 = time.perf_counter()
        v = evaluate(torch, model, val, eval_starts, block, batch)
        tl = "" if train_loss is None else f"{train_loss:.6f}"
        rows.append((step, train_loss, v, elapsed))
        if writer and step > 0:  # as char_gpt's CSV: rows after training steps only
            writer.writerow([step, tl, f"{v:.6f}", f"{elapsed:.3f}", f"{lr:.6g}"])
            csv_file.flush()
        print(f"step {step:5d}  val {v:.4f}  train {tl or '-':>8}  elapsed {elapsed:8.1f} s  "
              f"(eval {time.perf_counter() - t0:.1f} s)", flush=True)
        return v

    record(0, None, 0.0, 0.0)
    warmup = min(args.warmup, args.steps - 1)  # as char_gpt
    elapsed = 0.0  # training time only (window draw included): evaluation and logging are not counted
    step_ms = []
    smooth = 0.0
    for step in range(args.steps):
        t0 = time.perf_counter()
        starts = torch.randint(len(train) - block, (batch,), generator=gen).tolist()
        x, y = windows(torch, train, starts, block)
        lr = cosine_warmup_lr(step, args.lr, warmup, args.steps, args.min_lr)
        for group in opt.param_groups:
            group["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        with torch.no_grad():
            for w, mask in masked:
                w.mul_(mask)
        lv = loss.item()
        dt = time.perf_counter() - t0
        elapsed += dt
        step_ms.append(dt * 1e3)
        smooth = lv if step == 0 else 0.95 * smooth + 0.05 * lv  # char_gpt's smoothed train loss
        done = step + 1
        if done % args.log_every == 0 or done == args.steps:
            print(f"step {done:5d}  loss {lv:.4f}  lr {lr:.2e}  {dt * 1e3:7.1f} ms/step  "
                  f"{batch * block / dt:8.0f} tokens/s", flush=True)
        if done % args.eval_every == 0 or done == args.steps:
            record(done, smooth, elapsed, lr)

    val_loss = rows[-1][2]
    if csv_file:
        csv_file.close()
    if args.sample > 0:
        print("--- sample (temperature %.2f) ---" % args.temperature)
        t0 = time.perf_counter()
        text = sample(torch, model, alphabet, args.prompt, args.sample, args.temperature, block, args.seed)
        dt = time.perf_counter() - t0
        print(text)
        print("---")
        print("sampling: %d tokens in %.3f s, %.1f tokens/s (full window per token, no key/value cache)"
              % (args.sample, dt, args.sample / max(dt, 1e-9)))
    with torch.no_grad():  # the masks held: no weight outside its mask, the live count as set
        stray = sum(int(((w != 0) & (mask == 0)).sum()) for w, mask in masked)
        if stray:
            raise SystemExit(f"{stray} masked-out weights are nonzero after training")
    if masked:
        print(f"# static masks held: {sum(int(m.sum()) for _, m in masked)} live weights in {len(masked)} "
              f"masked matrices, none outside")
    mean_ms = statistics.fmean(step_ms) if step_ms else 0.0
    med_ms = statistics.median(step_ms) if step_ms else 0.0
    print(f"# step time: mean {mean_ms:.1f} ms, median {med_ms:.1f} ms, min {min(step_ms, default=0):.1f}, "
          f"max {max(step_ms, default=0):.1f}; peak RSS {peak_rss_mb():.0f} MB")
    print(f"RESULT val_loss={val_loss:.4f} ms_per_step={mean_ms:.1f} params={live} threads={args.threads} "
          f"dense_params={dense} steps={args.steps} attn_sparsity={args.attn_sparsity:g} "
          f"ffn_sparsity={args.ffn_sparsity:g} d_model={cfg['d_model']} d_ff={cfg['d_ff']}", flush=True)


# ----------------------------------------------------------------------------------------------
# time
# ----------------------------------------------------------------------------------------------

# impl -> (attention sparsity, FFN sparsity, uses sparselab)
TIME_IMPLS = {
    "torch-dense": (0.0, 0.0, False),
    "torch-dense-bf16": (0.0, 0.0, False),  # the same step under torch.autocast("cpu", dtype=torch.bfloat16)
    "sparselab-all": (0.7, 0.9, True),
    # no sparselab under bf16 autocast: sparselab 0.2.2's SparseLinear rejects the bf16
    # activations autocast hands it ("TypeError: Got unsupported ScalarType BFloat16")
    "sparselab-ffn": (0.0, 0.9, True),
}


def cmd_time_one(args) -> None:
    """One configuration in this process: prints one 'RESULT {json}' line."""
    set_threads_env(args.threads)
    import torch

    F = torch.nn.functional
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = CONFIGS[args.config]
    attn_s, ffn_s, uses_sl = TIME_IMPLS[args.impl]
    bf16 = args.impl.endswith("-bf16")
    sparselab = None
    if uses_sl:
        import sparselab  # noqa: F811 (its own libgomp reads OMP_NUM_THREADS here)

    def make_linear(kind, l, i, o):
        s = attn_s if kind in ATTENTION else ffn_s
        if s > 0.0:
            return sparselab.SparseLinear(i, o, bias=True, sparsity=s)
        return torch.nn.Linear(i, o, bias=True)

    model = build_model(torch, cfg, args.vocab, make_linear)
    algo = None
    if uses_sl and args.sparselab_algorithm == "set":
        # One SET per sparsity (sparselab's SET takes one target sparsity): attention, FFN.
        algo = []
        for s, kinds in ((attn_s, ATTENTION), (ffn_s, ("fc", "fc_proj"))):
            if s > 0.0:
                a = sparselab.SET(sparsity=s, drop_fraction=0.3, update_freq=args.delta_t, seed=args.seed)
                for blk in model.blocks:
                    for kind in kinds:
                        a.attach(getattr(blk, kind))
                algo.append(a)
    opt = torch.optim.AdamW(decay_groups(torch, model, 0.1), lr=1e-3, betas=(0.9, 0.99), eps=1e-8)
    g = torch.Generator().manual_seed(args.seed)
    block, batch = cfg["block"], cfg["batch"]
    x = torch.randint(args.vocab, (batch, block), generator=g)
    y = torch.randint(args.vocab, (batch, block), generator=g)
    params = list(model.parameters())
    t_counter = [0]

    def step() -> None:
        lr = cosine_warmup_lr(t_counter[0], 1e-3, 100, 2000, 1e-4)
        t_counter[0] += 1
        for group in opt.param_groups:
            group["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    def timed(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            out.append((time.perf_counter() - t0) * 1e3)
        return out

    for _ in range(args.warmup):
        step()
    times = timed(args.steps)  # steady state: no topology update inside
    update_ms = rebuild_ms = 0.0
    if algo:
        updates, extra = [], []
        for _ in range(args.set_updates):
            t0 = time.perf_counter()
            for a in algo:
                a.update()
            updates.append((time.perf_counter() - t0) * 1e3)
            first = timed(1)[0]
            extra.append(max(0.0, first - statistics.median(timed(2))))
        update_ms, rebuild_ms = statistics.median(updates), statistics.median(extra)
    amortised = (update_ms + rebuild_ms) / args.delta_t if algo else 0.0
    # live parameters: a SparseLinear's structural nonzeros (its value buffer also holds padding)
    live = 0
    for m in model.modules():
        own = list(m.parameters(recurse=False))
        if uses_sl and isinstance(m, sparselab.SparseLinear):
            live += m.nnz + sum(p.numel() for p in own if p is not m._values)
        else:
            live += sum(p.numel() for p in own)
    row = {
        "config": args.config, "impl": args.impl, "attn_sparsity": attn_s, "ffn_sparsity": ffn_s,
        "precision": "bf16 autocast" if bf16 else "fp32",
        "threads": args.threads, "torch_threads": torch.get_num_threads(),
        "median_ms": statistics.median(times) + amortised, "min_ms": min(times) + amortised,
        "max_ms": max(times) + amortised, "p25_ms": quantile(times, 0.25) + amortised,
        "p75_ms": quantile(times, 0.75) + amortised, "steady_ms": statistics.median(times),
        "topology": ("SET every %d steps, amortised" % args.delta_t) if algo else ("off" if uses_sl else "none"),
        "update_ms": update_ms, "rebuild_ms": rebuild_ms, "amortised_ms": amortised,
        "steps": len(times), "warmup": args.warmup, "tokens_per_step": batch * block,
        "live_params": live, "peak_rss_mb": peak_rss_mb(), "torch": torch.__version__,
        "sparselab": sparselab.__version__ if sparselab else "",
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", ""),
    }
    print("RESULT " + json.dumps(row), flush=True)


def cmd_time(args) -> None:
    """Runs every (threads, impl) in its own process and prints / writes the table."""
    threads = [int(t) for t in args.threads.split(",")]
    impls = args.impls.split(",")
    for i in impls:
        if i not in TIME_IMPLS:
            raise SystemExit(f"unknown impl '{i}' (choose from {', '.join(TIME_IMPLS)})")
    cpu = cpu_name()
    rows = []
    for t in threads:
        for impl in impls:
            env = dict(os.environ, OMP_NUM_THREADS=str(t), MKL_NUM_THREADS=str(t), PYTHONDONTWRITEBYTECODE="1")
            cmd = [sys.executable, "-W", "ignore", os.path.abspath(__file__), "time-one", "--impl", impl,
                   "--threads", str(t), "--config", args.config, "--steps", str(args.steps), "--warmup",
                   str(args.warmup), "--seed", str(args.seed), "--vocab", str(args.vocab),
                   "--sparselab-algorithm", args.sparselab_algorithm, "--delta-t", str(args.delta_t),
                   "--set-updates", str(args.set_updates)]
            print(f"timing {impl}, {args.config}, {t} thread(s) ...", file=sys.stderr, flush=True)
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            got = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            if p.returncode != 0 or not got:
                sys.stderr.write(p.stdout + p.stderr)
                raise SystemExit(f"{impl} at {t} thread(s) failed (exit {p.returncode})")
            r = json.loads(got[-1][len("RESULT "):])
            r["cpu"] = cpu
            rows.append(r)

    cols = ["cpu", "config", "impl", "attn_sparsity", "ffn_sparsity", "threads", "median_ms", "min_ms", "max_ms",
            "p25_ms", "p75_ms", "steps", "warmup", "topology", "update_ms", "amortised_ms", "tokens_per_step",
            "live_params", "peak_rss_mb", "torch", "sparselab", "torch_threads", "omp_num_threads"]
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: (f"{r[k]:.3f}" if isinstance(r[k], float) else r[k]) for k in cols})

    cfg = CONFIGS[args.config]
    print(f"GPT training step, config {args.config} (layers {cfg['layers']}, heads {cfg['heads']}, d_model "
          f"{cfg['d_model']}, d_ff {cfg['d_ff']}, block {cfg['block']}, batch {cfg['batch']}, vocab {args.vocab}); "
          f"AdamW + clip 1.0; {args.warmup} warm-up steps, median of {args.steps} timed (min-max)")
    print(f"CPU: {cpu}; torch {rows[0]['torch']}"
          + (f", sparselab {next((r['sparselab'] for r in rows if r['sparselab']), '')}"
             if any(r["sparselab"] for r in rows) else ""))
    print()
    print("| impl | attention / FFN sparsity | threads | ms/step | min-max ms | tokens/s | topology | live params "
          "| peak RSS MB | vs torch dense |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        dense = next((d for d in rows if d["impl"] == "torch-dense" and d["threads"] == r["threads"]), None)
        vs = f"{dense['median_ms'] / r['median_ms']:.2f}x" if dense else "-"
        print(f"| {r['impl']} | {r['attn_sparsity']:g} / {r['ffn_sparsity']:g} | {r['threads']} "
              f"| {r['median_ms']:.1f} | {r['min_ms']:.1f}-{r['max_ms']:.1f} "
              f"| {r['tokens_per_step'] / r['median_ms'] * 1e3:.0f} | {r['topology']}"
              + (f" (update {r['update_ms']:.0f} ms)" if r["update_ms"] else "") + f" | {r['live_params']} "
              f"| {r['peak_rss_mb']:.0f} | {vs} |")
    print()
    print(f"Load average: {' '.join(open('/proc/loadavg').read().split()[:3])}; {os.cpu_count()} CPUs.")


# ----------------------------------------------------------------------------------------------

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)

    t = sub.add_parser("train", help="train the small config (dense or static-masked) on Tiny Shakespeare")
    t.add_argument("--config", choices=sorted(CONFIGS), default="small")
    t.add_argument("--layers", type=int)
    t.add_argument("--heads", type=int)
    t.add_argument("--d-model", dest="d_model", type=int, help="256 for small; 512 for the wider model")
    t.add_argument("--d-ff", dest="d_ff", type=int, help="1024 for small; 2048 for the wider model")
    t.add_argument("--block", type=int)
    t.add_argument("--batch", type=int)
    t.add_argument("--attn-sparsity", type=float, default=0.0, help="static mask on qkv and proj, in [0, 1)")
    t.add_argument("--ffn-sparsity", type=float, default=0.0, help="static mask on fc and fc_proj, in [0, 1)")
    t.add_argument("--steps", type=int, default=2000)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--min-lr", type=float, default=1e-4)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--weight-decay", type=float, default=0.1)
    t.add_argument("--clip", type=float, default=1.0)
    t.add_argument("--eval-every", type=int, default=250)
    t.add_argument("--eval-windows", type=int, default=64)
    t.add_argument("--log-every", type=int, default=10)
    t.add_argument("--init", choices=["gpt2", "kaiming"], default="gpt2")
    t.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: training steps under torch.autocast(\"cpu\", dtype=torch.bfloat16)")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--text", default=DEFAULT_TEXT)
    t.add_argument("--csv", help="write step,train_loss,val_loss,elapsed_s here")
    t.add_argument("--sample", type=int, default=0, help="characters to sample at the end (0: none)")
    t.add_argument("--prompt", default="\n")
    t.add_argument("--temperature", type=float, default=0.8)

    def timing_args(q, threads_type):
        q.add_argument("--config", choices=sorted(CONFIGS), default="mini40m")
        q.add_argument("--threads", type=threads_type, default=threads_type("1"))
        q.add_argument("--steps", type=int, default=10, help="timed steps (median reported)")
        q.add_argument("--warmup", type=int, default=5)
        q.add_argument("--vocab", type=int, default=65)
        q.add_argument("--seed", type=int, default=1)
        q.add_argument("--sparselab-algorithm", choices=["off", "set"], default="off",
                       help="off: static topology (no update); set: sparselab.SET amortised over --delta-t")
        q.add_argument("--delta-t", type=int, default=100)
        q.add_argument("--set-updates", type=int, default=3)

    tm = sub.add_parser("time", help="time one training step per implementation, one process each")
    timing_args(tm, str)
    tm.set_defaults(threads="1,2")
    tm.add_argument("--impls", default=",".join(TIME_IMPLS))
    tm.add_argument("--csv", help="write one row per configuration here")
    one = sub.add_parser("time-one", help=argparse.SUPPRESS)
    timing_args(one, int)
    one.add_argument("--impl", choices=sorted(TIME_IMPLS), required=True)

    args = p.parse_args()
    for name in ("steps", "eval_every", "eval_windows", "log_every", "threads"):
        v = getattr(args, name, None)
        if isinstance(v, int) and v < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    {"train": cmd_train, "time": cmd_time, "time-one": cmd_time_one}[args.mode](args)


if __name__ == "__main__":
    main()
