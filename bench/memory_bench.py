#!/usr/bin/env python3
"""Per-rank model-state bytes and peak RSS of the four strategies, beside the ZeRO formulas.

  python3 bench/memory_bench.py [--config configs/llama/memory_105m.yaml] [--nproc 4] [--out runs/bench-memory]

Trains 2 steps per strategy at W = --nproc and reads rank 0's figures from metrics.jsonl.
Formulas (fp32 Adam, psi parameters, W ranks): no_shard 16psi, optim 8psi + 8psi/W,
optim_grads 4psi + 12psi/W, optim_grads_params 16psi/W (+ the gathered units, reported apart).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/llama/memory_105m.yaml")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--out", default="runs/bench-memory")
    args = ap.parse_args()
    W = args.nproc
    out = os.path.abspath(os.path.join(ROOT, args.out))
    rows = []
    for s in ["no_shard", "optim", "optim_grads", "optim_grads_params"]:
        run_dir = os.path.join(out, s)
        cmd = [os.path.join(ROOT, "build", "zeroshard"), "train", "--nproc", str(W), "--config", args.config,
               "--set", f"parallel.strategy={s}", "--set", f"run.dir={run_dir}", "--set", "run.progress=false"]
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            sys.exit(f"{s}: zeroshard failed")
        last = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))][-1]
        summary = json.load(open(os.path.join(run_dir, "summary.json")))
        psi = summary["num_params"]
        formula = {"no_shard": 16 * psi, "optim": 8 * psi + 8 * psi / W, "optim_grads": 4 * psi + 12 * psi / W,
                   "optim_grads_params": 16 * psi / W}[s]
        r0 = last["ranks"][0]
        state = r0["mem_params_bytes"] + r0["mem_grads_bytes"] + r0["mem_optim_bytes"]
        rss = [r["rss_peak_bytes"] for r in last["ranks"]]
        rows.append((s, psi, state, formula, r0["mem_gathered_peak_bytes"], summary["largest_unit_bytes"], rss))
    mb = 2**20
    lines = [f"W = {W}, psi = {rows[0][1]:,} parameters, config {args.config}",
             f"command: python3 bench/memory_bench.py --config {args.config} --nproc {W}", "",
             "| strategy | model state / rank (MB) | ZeRO formula (MB) | ratio | gathered peak (MB) | largest unit (MB) | peak RSS per rank (MB) |",
             "|---|---|---|---|---|---|---|"]
    for s, psi, state, formula, gathered, largest, rss in rows:
        lines.append(f"| {s} | {state / mb:.1f} | {formula / mb:.1f} | {state / formula:.3f} | {gathered / mb:.1f} | "
                     f"{largest / mb:.1f} | {' / '.join(f'{r / mb:.0f}' for r in rss)} |")
    text = "\n".join(lines)
    os.makedirs(out, exist_ok=True)
    open(os.path.join(out, "results.md"), "w").write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
