#!/usr/bin/python3
"""bench/torch_qwen3_peer.py (the speed suite's PyTorch DDP side for Qwen3) trains the same model
on the same batches as zeroshard: the tiny Qwen3 on licence paragraphs (padding) and on packed chat
conversations (segments, restarted positions, assistant-only targets), fp32, 2 ranks, 2
micro-batches per step. Every step's loss and gradient norm must agree with zeroshard's
metrics.jsonl to float32 rounding; a batches file cut short must be refused naming the file.

    test_torch_peer.py ZEROSHARD
Exit 0: all passed; 1: a check failed (each failure printed).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ZS = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PEER = os.path.join(SRC, "bench", "torch_qwen3_peer.py")
TMP = tempfile.mkdtemp(prefix="zs-qwen3-peer.")
FAILED = []


def sh(cmd, expect=0):
    r = subprocess.run(cmd, cwd=SRC, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != expect:
        sys.exit(f"FAIL: exit {r.returncode} (expected {expect}): {' '.join(cmd)}\n{r.stdout[-3000:]}")
    return r.stdout


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILED.append(what)


def parity(name, config, extra):
    data, run, out = os.path.join(TMP, name + "_data"), os.path.join(TMP, name), os.path.join(TMP, name + ".jsonl")
    sh([ZS, "prepare", "--config", config, "--set", "data.output=" + data])
    sh([ZS, "train", "--nproc", "2", "--config", config, "--set", "data.datasets=" + data, "--set", "run.dir=" + run,
        "--set", "train.steps=3", "--set", "train.grad_accum=2", "--set", "mixed_precision.param_dtype=fp32",
        "--set", "run.dump_init=true", "--set", "run.dump_batches=true", "--set", "train.save_final=false",
        "--set", "run.progress=false"] + extra)
    ours = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    sh(["/usr/bin/python3", PEER, "--mode", "ddp", "--run-dir", run, "--nproc", "2", "--out", out, "--quiet"])
    theirs = [r for r in map(json.loads, open(out)) if not r.get("summary")]
    check(len(ours) == len(theirs) == 3, f"{name}: 3 steps on each side ({len(ours)}, {len(theirs)})")
    for a, b in zip(ours, theirs):
        dl = abs(a["loss"] - b["loss"]) / abs(b["loss"])
        dg = abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"])
        check(dl < 1e-5 and dg < 1e-4, f"{name} step {a['step']}: loss {a['loss']:.8f} vs {b['loss']:.8f} "
              f"(rel {dl:.1e} < 1e-5), grad norm {a['grad_norm']:.6f} vs {b['grad_norm']:.6f} (rel {dg:.1e} < 1e-4)")
    return run


parity("text", "configs/qwen3/base.yaml", ["--set", "train.micro_batch_size=2"])
run = parity("chat", "configs/qwen3/chat.yaml", [])

# A batches file one byte short: refused before any rank starts, naming the file and its shape.
bad = os.path.join(run, "batches.rank1.bin")
with open(bad, "r+b") as f:
    f.truncate(os.path.getsize(bad) - 1)
msg = sh(["/usr/bin/python3", PEER, "--mode", "ddp", "--run-dir", run, "--nproc", "2",
          "--out", os.path.join(TMP, "bad.jsonl")], expect=2)
check("batches.rank1.bin" in msg and "micro_batch_size x seq_len" in msg, f"a short batches file is named: {msg.strip()}")

if FAILED:
    print(f"{len(FAILED)} check(s) failed")
    sys.exit(1)
shutil.rmtree(TMP)
print("all passed")
