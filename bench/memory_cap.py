#!/usr/bin/env python3
"""A model whose full fp32 model states (16 psi bytes) exceed what one rank may use, trained,
saved and reloaded at W = 4 under optim_grads_params with a per-rank cap below 16 psi.

  python3 bench/memory_cap.py [--config configs/llama/memory_105m.yaml] [--cap-mb 1024] [--out runs/bench-memory-cap]

The cap is run.max_rss_mb: every rank compares the kernel's high-water mark of its resident
memory (getrusage ru_maxrss) with it after initialization, after every step and after every
save, and fails naming the phase when above. Three runs:
  1. optim_grads_params: initialize (deferred, shard by shard), train 4 steps, save at 2 and 4;
  2. the same, resumed from the step-2 checkpoint (load), trained to 4 and saved;
  3. no_shard under the same cap: must fail (its 16 psi does not fit), naming the rank and phase.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W = 4


def run(args, out_dir, expect_ok=True):
    cmd = [os.path.join(ROOT, "build", "zeroshard"), "train", "--nproc", str(W)] + args + \
          ["--set", f"run.dir={out_dir}", "--set", "run.progress=false"]
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if (p.returncode == 0) != expect_ok:
        sys.exit(f"unexpected exit {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def phases(run_dir):
    """Per rank: peak RSS (MiB) after initialization, at the last save, and at the end."""
    out = []
    for r in range(W):
        text = open(os.path.join(run_dir, f"rank{r}.log")).read()
        init = int(re.search(r"initialized: peak RSS (\d+) MiB", text).group(1))
        saves = [int(x) for x in re.findall(r"saved .* peak RSS (\d+) MiB", text)]
        out.append((init, max(saves) if saves else None))
    last = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))][-1]
    return out, [x["rss_peak_bytes"] / 2**20 for x in last["ranks"]], last


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/llama/memory_105m.yaml")
    ap.add_argument("--cap-mb", type=int, default=1024)
    ap.add_argument("--out", default="runs/bench-memory-cap")
    a = ap.parse_args()
    out = os.path.abspath(os.path.join(ROOT, a.out))
    common = ["--config", a.config, "--set", "train.steps=4", "--set", "train.save_every=2",
              "--set", f"run.max_rss_mb={a.cap_mb}"]
    train_dir, resume_dir, noshard_dir = (os.path.join(out, n) for n in ("train", "resume", "no_shard"))
    run(common + ["--set", "parallel.strategy=optim_grads_params"], train_dir)
    run(common + ["--set", "parallel.strategy=optim_grads_params", "--resume",
                  os.path.join(train_dir, "checkpoints", "step_00000002")], resume_dir)
    failed = run(common + ["--set", "parallel.strategy=no_shard"], noshard_dir, expect_ok=False)
    psi = json.load(open(os.path.join(train_dir, "summary.json")))["num_params"]
    mb = 2**20
    lines = [f"psi = {psi:,} parameters; 16 psi = {16 * psi / mb:.0f} MiB; cap run.max_rss_mb = {a.cap_mb} MiB per rank; W = {W}",
             f"command: python3 bench/memory_cap.py --config {a.config} --cap-mb {a.cap_mb}", "",
             "| run | rank | peak RSS after init (MiB) | after last save (MiB) | at the end (MiB) | model state (MiB) |",
             "|---|---|---|---|---|---|"]
    for name, d in (("train + save", train_dir), ("load + train + save", resume_dir)):
        per_rank, final, last = phases(d)
        for r in range(W):
            x = last["ranks"][r]
            state = (x["mem_params_bytes"] + x["mem_grads_bytes"] + x["mem_optim_bytes"]) / mb
            lines.append(f"| {name} | {r} | {per_rank[r][0]} | {per_rank[r][1]} | {final[r]:.0f} | {state:.0f} |")
    err = [l for l in failed.stderr.splitlines() if "exceeds run.max_rss_mb" in l]
    lines += ["", "no_shard under the same cap fails: `" + (err[0].strip() if err else failed.stderr.strip()[-300:]) + "`"]
    text = "\n".join(lines)
    os.makedirs(out, exist_ok=True)
    open(os.path.join(out, "results.md"), "w").write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
