#!/usr/bin/env python3
"""The memory-plan table of docs/benchmarks.md: `zeroshard plan --json` for each world size and
each strategy, for LoRA (the --lora settings) and full training, as a markdown table of model
state per rank in GB (1e9 B; activations not counted; gathered = ZeRO-3's root plus its live
units in the param dtype).

  python3 bench/plan_table.py --config configs/z_image/6b.yaml \
      --set z_image.cache=cache --lora rank=32,alpha=32,targets=to_q,to_k,to_v,to_out.0,w1,w2,w3

Each --set is passed to every plan; --lora "" plans full training only.
"""
import argparse
import json
import subprocess


def plan(binary, config, world, sets):
    cmd = [binary, "plan", "--config", config, "--nproc", str(world), "--json"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/zeroshard")
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--lora", default="", help="LoRA settings: rank=R,alpha=A,targets=t1,t2,... (targets last)")
    ap.add_argument("--worlds", default="8,16,64")
    a = ap.parse_args()

    runs = []
    if a.lora:
        head, _, targets = a.lora.partition("targets=")
        lora = [f"lora.{kv}" for kv in head.strip(",").split(",") if kv]
        if targets:
            lora.append(f"lora.targets={targets}")
        runs.append(("LoRA r" + dict(kv.split("=") for kv in head.strip(",").split(","))["rank"], lora))
    runs.append(("full", []))

    print("| run | W | strategy | params | grads | optim | model state | gathered peak |")
    print("|---|---|---|---|---|---|---|---|")
    gb = lambda b: f"{b / 1e9:.3f}"
    for name, extra in runs:
        for w in (int(x) for x in a.worlds.split(",")):
            p = plan(a.binary, a.config, w, a.sets + extra)
            for s in p["strategies"]:
                print(f"| {name} | {w} | {s['strategy']} | {gb(s['params_bytes'])} | {gb(s['grads_bytes'])} | "
                      f"{gb(s['optim_bytes'])} | {gb(s['model_state_bytes'])} | {gb(s['gathered_peak_bytes'])} |")
    p = plan(a.binary, a.config, 8, a.sets + (runs[0][1] if a.lora else []))
    print(f"\n{p['num_params']:,} parameters, {p['num_trainable']:,} trained ({runs[0][0]}), param_dtype {p['param_dtype']}")


if __name__ == "__main__":
    main()
