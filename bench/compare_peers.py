#!/usr/bin/env python3
"""Side-by-side benchmark: zeroshard's four strategies against PyTorch DDP and
ZeroRedundancyOptimizer (Debian's python3-torch, gloo) on the identical model, initial
weights, data and batch, all at W ranks on this machine, in one run.

  python3 bench/compare_peers.py [--config configs/llama/bench.yaml] [--nproc 2]
                                 [--steps 30] [--out runs/bench-peers] [--set k=v ...]

zeroshard runs first (no_shard dumps init.safetensors and the batches of every rank);
the PyTorch peers then train from that run directory. Prints a markdown table and writes
it to OUT/results.md. Timing is noisy on shared machines: compare ratios within one run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATEGIES = ["no_shard", "optim", "optim_grads", "optim_grads_params"]


# zeroshard sets these malloc parameters at start-up (src/cli/main.cpp: mallopt M_MMAP_MAX 0 and
# M_TRIM_THRESHOLD -1); the PyTorch peers get the same through glibc's tunables so that the
# comparison is about the training code.
SAME_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=18446744073709551615"


def run(cmd, env=None):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=ROOT, env=env)
    if r.returncode != 0:
        sys.exit(f"command failed with exit code {r.returncode}: {' '.join(cmd)}")


def summarize_zeroshard(run_dir):
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    times = [l["step_time_s"] for l in lines]
    times = times[2:] if len(times) > 4 else times
    med = statistics.median(times)
    tokens = lines[0]["tokens_per_s"] * lines[0]["step_time_s"]
    rss = [max(l["ranks"][r]["rss_peak_bytes"] for l in lines) for r in range(len(lines[0]["ranks"]))]
    state = lines[-1]["ranks"][0]
    return {
        "losses": {l["step"]: l["loss"] for l in lines},
        "median_step_time_s": med,
        "tokens_per_s": tokens / med,
        "rss": rss,
        "state_bytes": state["mem_params_bytes"] + state["mem_grads_bytes"] + state["mem_optim_bytes"],
    }


def summarize_torch(path, peer):
    steps, summary = {}, None
    for l in open(path):
        j = json.loads(l)
        if j.get("peer") != peer:
            continue
        if j.get("summary"):
            summary = j
        else:
            steps[j["step"]] = j["loss"]
    return {"losses": steps, "median_step_time_s": summary["median_step_time_s"],
            "tokens_per_s": summary["tokens_per_s"], "rss": summary["rss_peak_bytes_per_rank"], "state_bytes": None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/llama/bench.yaml")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", default="runs/bench-peers")
    ap.add_argument("--repeats", type=int, default=3, help="round-robin repetitions of every configuration")
    ap.add_argument("--set", action="append", default=[], help="extra zeroshard config overrides")
    ap.add_argument("--peer-default-malloc", action="store_true",
                    help="run the PyTorch peers with glibc's default malloc instead of zeroshard's settings")
    args = ap.parse_args()
    out = os.path.abspath(os.path.join(ROOT, args.out))
    os.makedirs(out, exist_ok=True)
    binary = os.path.join(ROOT, "build", "zeroshard")
    # Round-robin repeats: the machine is shared, so every configuration gets the same share of
    # quiet and busy periods; each row reports the median over repeats of the run medians.
    runs = {}
    peers_out = os.path.join(out, "torch_peers.jsonl")  # one file per repetition: .rep<k>
    env = dict(os.environ)
    if not args.peer_default_malloc:
        env["GLIBC_TUNABLES"] = SAME_MALLOC
    for rep in range(args.repeats):
        for s in STRATEGIES:
            run_dir = os.path.join(out, f"zs_{s}" + (f"_rep{rep}" if rep else ""))
            cmd = [binary, "train", "--nproc", str(args.nproc), "--config", args.config,
                   "--set", f"train.steps={args.steps}", "--set", f"parallel.strategy={s}",
                   "--set", f"run.dir={run_dir}", "--set", "run.progress=false"]
            if s == "no_shard" and rep == 0:
                cmd += ["--set", "run.dump_init=true", "--set", "run.dump_batches=true"]
            for kv in args.set:
                cmd += ["--set", kv]
            run(cmd)
            runs.setdefault("zeroshard " + s, []).append(summarize_zeroshard(run_dir))
        for mode, peer in (("ddp", "torch_ddp"), ("zero", "torch_zero")):
            rep_out = peers_out + f".rep{rep}"
            if os.path.exists(rep_out):
                os.remove(rep_out)
            run(["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_peer.py"), "--mode", mode, "--run-dir",
                 os.path.join(out, "zs_no_shard"), "--nproc", str(args.nproc), "--out", rep_out, "--quiet"], env)
            runs.setdefault(peer.replace("_", " "), []).append(summarize_torch(rep_out, peer))
    results = {}
    for name, reps in runs.items():
        r = dict(reps[0])
        r["median_step_time_s"] = statistics.median(x["median_step_time_s"] for x in reps)
        r["tokens_per_s"] = statistics.median(x["tokens_per_s"] for x in reps)
        r["all_medians"] = [x["median_step_time_s"] for x in reps]
        results[name] = r

    ddp = results["torch ddp"]
    no_shard = results["zeroshard no_shard"]
    rows = ["| run | loss@1 | loss@10 | loss@%d | max rel. loss diff vs DDP | median step (s) | tokens/s | "
            "x DDP time | x no_shard time | run medians (s) | peak RSS per rank (MB) | model state / rank (MB) |" % args.steps,
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        diffs = [abs(r["losses"][s] - ddp["losses"][s]) / abs(ddp["losses"][s]) for s in ddp["losses"] if s in r["losses"]]
        rows.append("| %s | %.6f | %.6f | %.6f | %.2e | %.4f | %.0f | %.2f | %.2f | %s | %s | %s |" % (
            name, r["losses"].get(1, float("nan")), r["losses"].get(10, float("nan")),
            r["losses"].get(args.steps, float("nan")), max(diffs), r["median_step_time_s"], r["tokens_per_s"],
            r["median_step_time_s"] / ddp["median_step_time_s"],
            r["median_step_time_s"] / no_shard["median_step_time_s"],
            " ".join("%.3f" % t for t in r["all_medians"]),
            " / ".join("%.0f" % (b / 2**20) for b in r["rss"]),
            "%.1f" % (r["state_bytes"] / 2**20) if r["state_bytes"] else "-"))
    table = "\n".join(rows)
    header = (f"config {args.config}, {args.nproc} ranks, {args.steps} steps, overrides {args.set or 'none'}, "
              f"peers with {'default malloc' if args.peer_default_malloc else 'GLIBC_TUNABLES=' + SAME_MALLOC}\n"
              f"command: python3 bench/compare_peers.py --config {args.config} --nproc {args.nproc} "
              f"--steps {args.steps} --repeats {args.repeats}" + (" --peer-default-malloc" if args.peer_default_malloc else "") + "".join(f" --set {kv}" for kv in args.set) + "\n\n")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(header + table + "\n")
    print(header + table)


if __name__ == "__main__":
    main()
