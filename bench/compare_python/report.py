"""Merges sprig's train_step CSV with the PyTorch/sparselab results into one markdown table.

usage: report.py sprig.csv python.jsonl [python.csv]
The optional third argument receives the Python results in train_step's CSV columns
(speedup_vs_dense: against PyTorch dense at the same thread count).
"""
from __future__ import annotations

import csv
import json
import sys


def key(model: str, sparsity: float, threads: int) -> tuple[str, float, int]:
    return (model, round(float(sparsity), 4), int(threads))


def main() -> None:
    sprig = {}
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            sprig[key(r["model"], r["sparsity"], r["threads"])] = r
    torch_dense, sparselab = {}, {}
    with open(sys.argv[2]) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            k = key(r["model"], r["sparsity"], r["threads"])
            (torch_dense if r["impl"] == "torch-dense" else sparselab)[k] = r

    def ms(r, field="median_ms"):
        return float(r[field]) if r is not None else None

    def f(v, spec="{:.2f}"):
        return spec.format(v) if v is not None else "-"

    print("| model | sparsity | threads | sprig ms/step | sprig IQR | sprig dense (OpenBLAS) ms | torch dense ms "
          "| sparselab ms (IQR) | sparselab SET update ms | sprig vs own dense | sprig vs torch dense "
          "| sprig vs sparselab | peak RSS MB sprig / torch / sparselab |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    keys = sorted(set(sprig) | set(sparselab), key=lambda k: (k[2], k[0], k[1]))
    bars = []
    for k in keys:
        model, s, t = k
        sp = sprig.get(k)
        dense = sprig.get(key(model, 0, t))
        td = torch_dense.get(key(model, 0, t))
        sl = sparselab.get(k)
        sp_ms = ms(sp)
        vs_own = ms(dense) / sp_ms if dense and sp_ms else None
        vs_torch = ms(td) / sp_ms if td and sp_ms else None
        vs_sl = ms(sl) / sp_ms if sl and sp_ms else None
        sl_cell = f"{ms(sl):.2f} ({sl['p25_ms']:.1f}-{sl['p75_ms']:.1f})" if sl else "-"
        rss = " / ".join([sp["peak_rss_mb"] if sp else "-",
                          f(td["peak_rss_mb"], "{:.0f}") if td and s == 0 else "-",
                          f(sl["peak_rss_mb"], "{:.0f}") if sl else "-"])
        print(f"| {model} | {s:g} | {t} | {f(sp_ms)} | {sp['spread'] if sp else '-'} | {f(ms(dense))} | {f(ms(td))} "
              f"| {sl_cell} | {f(sl['update_ms'] if sl else None, '{:.0f}')} | {f(vs_own, '{:.2f}x')} "
              f"| {f(vs_torch, '{:.2f}x')} | {f(vs_sl, '{:.2f}x')} | {rss} |")
        if abs(s - 0.9) < 1e-9:
            bars.append((model, t, vs_torch, vs_sl))
    print("\nBars at sparsity 0.9: sprig >= 3x faster than PyTorch dense, >= 5x faster than sparselab 0.2.2\n")
    print("| model | threads | vs torch dense | held | vs sparselab | held |")
    print("|---|---|---|---|---|---|")
    for model, t, vt, vs in bars:
        print(f"| {model} | {t} | {f(vt, '{:.2f}x')} | {'yes' if vt and vt >= 3 else 'NO'} "
              f"| {f(vs, '{:.2f}x')} | {'yes' if vs and vs >= 5 else 'NO'} |")
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["model", "sparsity", "threads", "impl", "median_ms", "spread", "speedup_vs_dense", "peak_rss_mb"])
            for k, r in sorted(list(torch_dense.items()) + list(sparselab.items()), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
                td = torch_dense.get(key(r["model"], 0, r["threads"]))
                w.writerow([r["model"], r["sparsity"], r["threads"], r["impl"], f"{r['median_ms']:.3f}",
                            f"{r['p25_ms']:.3f}-{r['p75_ms']:.3f}", f"{ms(td) / r['median_ms']:.2f}" if td else "",
                            f"{r['peak_rss_mb']:.1f}"])
    versions = {r.get("torch") for r in list(torch_dense.values()) + list(sparselab.values())}
    print(f"\ntorch {', '.join(sorted(v for v in versions if v))}; sparselab "
          f"{', '.join(sorted({r.get('sparselab', '') for r in sparselab.values()}))}; ms/step = median step + "
          f"(SET update + post-update rebuild) / delta_t for the sparse rows. Python RSS includes the torch import.")


if __name__ == "__main__":
    main()
