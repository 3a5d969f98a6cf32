#!/usr/bin/env python3
"""Step time under CPU contention: the same training run quiet, beside one and beside two busy
processes (`yes > /dev/null`, one per core on this 2-core machine), at --nproc 1 and --nproc 2.

    python3 bench/contention.py [--binary build/zeroshard] [--configs base,bench] [--nprocs 1,2]
        [--busy 0,1,2] [--steps 20] [--set key=value ...]

Prints a markdown table: median step_time_s over the steps after the first two (metrics.jsonl
of rank 0), and the ratio to the quiet run of the same row. Run it with nothing else busy on
the machine (under /work/bin/cpulock on the shared machine). Not a test: timing belongs here.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import machine

CONFIGS = {"base": "configs/llama/base.yaml", "bench": "configs/llama/bench.yaml"}


def run(binary, config, nproc, busy, steps, extra):
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(busy)]
    try:
        time.sleep(0.5)  # let the busy loops take their cores
        with tempfile.TemporaryDirectory(prefix="zs-contention-") as d:
            cmd = [binary, "train", "--config", config, "--nproc", str(nproc),
                   "--set", f"train.steps={steps}", "--set", f"run.dir={d}/run",
                   "--set", "train.save_final=false", "--set", f"train.log_every={steps}"]
            for kv in extra:
                cmd += ["--set", kv]
            t0 = time.time()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            wall = time.time() - t0
            with open(os.path.join(d, "run", "metrics.jsonl")) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            times = [r["step_time_s"] for r in rows if "step_time_s" in r]
            losses = [r["loss"] for r in rows if "loss" in r]
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return statistics.median(times[2:]), wall, losses


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default="build/zeroshard")
    p.add_argument("--configs", default="base,bench")
    p.add_argument("--nprocs", default="1,2")
    p.add_argument("--busy", default="0,1,2")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--set", action="append", default=[], dest="extra")
    a = p.parse_args()
    busy_levels = [int(b) for b in a.busy.split(",")]
    env = {k: os.environ[k] for k in ("ZEROSHARD_THREAD_ENV", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT") if k in os.environ}
    print(f"command: {' '.join(f'{k}={v}' for k, v in env.items())} python3 bench/contention.py {' '.join(sys.argv[1:])}")
    print(f"machine: {machine.describe()}")
    header = "| model | --nproc | " + " | ".join(
        f"{b} busy: s/step (x quiet)" if b else "quiet: s/step" for b in busy_levels) + " | losses equal | last loss |"
    print(header)
    print("|" + "---|" * (len(busy_levels) + 4))
    for name in a.configs.split(","):
        for nproc in [int(n) for n in a.nprocs.split(",")]:
            cells, quiet, first_losses, same = [], None, None, True
            for busy in busy_levels:
                med, _, losses = run(a.binary, CONFIGS.get(name, name), nproc, busy, a.steps, a.extra)
                if first_losses is None:
                    first_losses = losses
                same = same and losses == first_losses
                if busy == 0:
                    quiet = med
                    cells.append(f"{med:.3f}")
                else:
                    cells.append(f"{med:.3f} ({med / quiet:.2f}x)" if quiet else f"{med:.3f}")
                sys.stdout.flush()
            print(f"| {name} | {nproc} | " + " | ".join(cells) + f" | {'yes' if same else 'NO'} | {first_losses[-1]!r} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
