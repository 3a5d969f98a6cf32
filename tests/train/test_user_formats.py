#!/usr/bin/python3
"""What users bring and take, through the `zeroshard` binary, checked by readers of our own:

  foreign   --deepspeed / --accelerate-config / Megatron flags train exactly like the --set keys
            they map to (bitwise equal losses); refused keys are named; `config show` names the
            foreign key each value came from
  tb        run.tensorboard: event files (CRC-checked, parsed by python3-protobuf through
            tests/io/read_tfevents.py) hold the loss of every metrics.jsonl line
  peft      export --peft: adapter_model.safetensors (read here byte by byte: 8-byte header
            length, JSON header, raw little-endian data) + adapter_config.json; lora.init_from
            starts a run from it; export --merge-lora equals W + alpha/r * B @ A computed here;
            train.save_model_only checkpoints hold no optimizer state and refuse --resume
  plan      `zeroshard plan --json` model-state bytes within 1 % of what a run measures
            (metrics.jsonl), and its bytes sent per step exactly as measured, for every
            strategy at 2 and 3 ranks with gradient accumulation
  mfu       metrics.jsonl's tflops_per_rank equals FLOPs per token (counted here from the
            initial weights' shapes, as torchtitan counts) x tokens/s / ranks, and mfu > 0

    test_user_formats.py ZEROSHARD [part ...]      (default: all parts)
Exit 0: all passed; 1: a check failed (each failure printed).
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import torch

ZS = os.path.abspath(sys.argv[1])
PARTS = sys.argv[2:] or ["foreign", "tb", "peft", "plan", "mfu"]
SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TMP = tempfile.mkdtemp(prefix="zs-user-formats.")
FAILED = []

# tests/support/train_run.cpp's kSmallModel (a small Llama on generated text).
SMALL = ("--set data.source=synthetic --set model.dim=48 --set model.n_layers=2 --set model.n_heads=4 "
         "--set model.n_kv_heads=2 --set model.ffn_hidden=100 --set model.max_seq_len=32 --set train.seq_len=32 "
         "--set train.lr=0.01 --set train.min_lr=0.001 --set train.warmup_steps=3 --set run.progress=false "
         "--set parallel.comm_timeout_s=60").split()


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + str(detail)[:3000]))
    if not ok:
        FAILED.append(name)
    return ok


def zs(*args):
    p = subprocess.run([ZS, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    return p.returncode, p.stdout


_runs = 0


def train(args, nproc=2, steps=3, expect_ok=True):
    """Runs `zeroshard train` in a fresh folder; returns (folder, rc, output)."""
    global _runs
    _runs += 1
    d = os.path.join(TMP, "run%d" % _runs)
    rc, out = zs("train", "--nproc", str(nproc), *SMALL, "--set", "train.steps=%d" % steps, "--set", "run.dir=" + d,
                 *args)
    if expect_ok and rc != 0:
        check("train %s" % " ".join(args), False, out)
    return d, rc, out


def metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f]


def losses(d):
    try:
        return [(m["step"], float(m["loss"]), float(m["grad_norm"])) for m in metrics(d)]
    except OSError as e:
        return str(e)


DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F64": torch.float64, "I64": torch.int64, "U8": torch.uint8}


def read_safetensors(path):
    """name -> tensor, and the metadata: parsed by hand (no safetensors package)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        raw = bytearray(blob[8 + n + b:8 + n + end])
        t = torch.frombuffer(raw, dtype=DTYPES[e["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out, meta


def part_foreign():
    ds = os.path.join(TMP, "ds.json")
    with open(ds, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 2,
                   "gradient_clipping": 0.5, "bf16": {"enabled": False},
                   "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto",
                                         "offload_optimizer": {"device": "none"}}}, f)
    ref, _, _ = train(["--set", "parallel.strategy=optim_grads", "--set", "train.grad_accum=2",
                       "--set", "train.clip_grad_norm=0.5"])
    got, _, _ = train(["--deepspeed", ds])
    check("--deepspeed (stage 2, accumulation 2, clipping 0.5) trains like the --set keys, bitwise",
          losses(got) == losses(ref) and len(losses(ref)) == 3, (losses(ref), losses(got)))
    rc, out = zs("config", "show", *SMALL, "--deepspeed", ds)
    line = [l for l in out.splitlines() if l.startswith("parallel.zero_stage") or l.startswith("parallel.strategy")]
    check("config show names the DeepSpeed key a value came from",
          rc == 0 and any("zero_optimization.stage" in l for l in line) and "gradient_clipping" in out
          and "foreign settings" in out, out)
    rc, out = zs("train", "--nproc", "2", *SMALL, "--deepspeed",
                 os.path.join(SRC, "tests/train/foreign/ds_zero3_offload.json"), "--set", "run.dir=" + TMP + "/off")
    check("--deepspeed with offload_optimizer.device cpu: refused naming the key",
          rc != 0 and "offload_optimizer" in out and not os.path.exists(TMP + "/off/metrics.jsonl"), out)

    acc = os.path.join(TMP, "zero3.yaml")
    with open(acc, "w") as f:
        f.write("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
                "  gradient_accumulation_steps: 1\n  offload_optimizer_device: none\n  offload_param_device: none\n"
                "  zero3_init_flag: true\n  zero_stage: 3\nmixed_precision: 'no'\nnum_machines: 1\n"
                "num_processes: 2\nuse_cpu: false\n")
    ref3, _, _ = train(["--set", "parallel.strategy=optim_grads_params"])
    # No --nproc: accelerate's num_processes says 2.
    d = os.path.join(TMP, "acc")
    rc, out = zs("train", *SMALL, "--set", "train.steps=3", "--set", "run.dir=" + d, "--accelerate-config", acc)
    check("--accelerate-config (zero_stage 3, num_processes 2) trains like --nproc 2 optim_grads_params, bitwise",
          rc == 0 and losses(d) == losses(ref3), out if rc else (losses(ref3), losses(d)))
    rc, out = zs("train", "--nproc", "2", *SMALL, "--accelerate-config",
                 os.path.join(SRC, "tests/train/foreign/accelerate_zero3.yaml"), "--set", "run.dir=" + TMP + "/acc8")
    check("accelerate num_processes 8 against --nproc 2: refused", rc != 0 and "num_processes" in out, out)

    refm, _, _ = train(["--set", "parallel.strategy=optim_grads", "--set", "train.micro_batch_size=2",
                        "--set", "train.global_batch_size=8"])
    gotm, _, _ = train(["--use_megatron_fsdp", "true", "--data_parallel_sharding_strategy", "optim_grads",
                        "--micro_batch_size", "2", "--global_batch_size", "8"])
    check("ms-swift / Megatron flags train like the --set keys, bitwise",
          losses(gotm) == losses(refm) and len(losses(refm)) == 3, (losses(refm), losses(gotm)))


def part_tb():
    d, rc, _ = train(["--set", "run.tensorboard=true"], steps=4)
    if rc != 0:
        return
    files = [f for f in os.listdir(d) if f.startswith("events.out.tfevents.")]
    if not check("run.tensorboard: one event file", len(files) == 1, os.listdir(d)):
        return
    pb2 = os.path.join(TMP, "pb2")
    os.makedirs(pb2, exist_ok=True)
    subprocess.run(["protoc", "-I" + os.path.join(SRC, "src/io"), "--python_out=" + pb2,
                    os.path.join(SRC, "src/io/tensorboard_event.proto")], check=True)
    p = subprocess.run(["/usr/bin/python3", os.path.join(SRC, "tests/io/read_tfevents.py"), os.path.join(d, files[0]),
                        pb2], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not check("event file: framing, CRCs and protobufs valid", p.returncode == 0, p.stdout):
        return
    events = json.loads(p.stdout)
    by_step = {}
    for e in events:
        for tag, v in e.get("scalars", []):
            by_step.setdefault(e["step"], {})[tag] = v
    want = {m["step"]: struct.unpack("<f", struct.pack("<f", float(m["loss"])))[0] for m in metrics(d)}
    got = {s: v.get("loss") for s, v in by_step.items()}
    check("event file: the loss of every metrics.jsonl step (as float32)", got == want, (want, got))


def part_peft():
    lora = ["--set", "lora.rank=4", "--set", "lora.alpha=8", "--set", "lora.targets=wq,wv"]
    d, rc, _ = train(lora, steps=3)
    if rc != 0:
        return
    adapter = os.path.join(TMP, "adapter")
    rc, out = zs("export", d, adapter, "--peft")
    if not check("export --peft", rc == 0, out):
        return
    full = os.path.join(TMP, "full.safetensors")
    rc, out = zs("export", d, full)
    check("export (base and adapters)", rc == 0, out)
    base, _ = read_safetensors(full)
    tensors, _ = read_safetensors(os.path.join(adapter, "adapter_model.safetensors"))
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        cfg = json.load(f)
    check("adapter_config.json: LORA, r 4, lora_alpha 8, target_modules wq wv",
          cfg.get("peft_type") == "LORA" and cfg.get("r") == 4 and cfg.get("lora_alpha") == 8
          and sorted(cfg.get("target_modules", [])) == ["wq", "wv"], cfg)
    # Every adapter of the run, under PEFT's names for the modules' released names, same bits.
    ours = {k: v for k, v in base.items() if k.endswith(".lora_a") or k.endswith(".lora_b")}
    expected = {}
    for k, v in ours.items():
        module, kind = k.rsplit(".", 1)
        expected["base_model.model.%s.%s.weight" % (module, "lora_A" if kind == "lora_a" else "lora_B")] = v
    check("adapter_model.safetensors: base_model.model.<module>.lora_A/B.weight for every adapter, equal bits",
          len(expected) > 0 and sorted(tensors) == sorted(expected)
          and all(torch.equal(tensors[k], expected[k]) for k in expected), (sorted(tensors), sorted(expected)))
    shapes_ok = True
    for k, t in tensors.items():
        module = k[len("base_model.model."):].rsplit(".", 2)[0]
        w = base[module + ".weight"]
        r = cfg["r"]
        shapes_ok &= list(t.shape) == ([r, w.shape[1]] if ".lora_A." in k else [w.shape[0], r])
    check("PEFT shapes: lora_A [r, in], lora_B [out, r] of each target's weight", shapes_ok and len(tensors) == 2 * 2 * 2,  # layers x targets x (A, B)
          {k: list(t.shape) for k, t in tensors.items()})
    # B is trained away from its zero start: a merge that ignored it would pass unnoticed otherwise.
    check("adapters trained (lora_B non-zero)", any(t.abs().sum() > 0 for k, t in tensors.items() if "lora_B" in k))

    merged_path = os.path.join(TMP, "merged.safetensors")
    rc, out = zs("export", d, merged_path, "--merge-lora")
    if check("export --merge-lora", rc == 0, out):
        merged, _ = read_safetensors(merged_path)
        want = {k: v for k, v in base.items() if k not in ours}
        for k in list(want):
            m = k[:-len(".weight")] if k.endswith(".weight") else None
            if m and m + ".lora_a" in ours:
                delta = (ours[m + ".lora_b"].double() @ ours[m + ".lora_a"].double()) * (8 / 4)
                want[k] = (want[k].double() + delta).float()
        check("merged weights == W + alpha/r * B @ A (float64, rounded once), no adapter tensors",
              sorted(merged) == sorted(want) and all(torch.equal(merged[k], want[k]) for k in want),
              [k for k in want if k not in merged or not torch.equal(merged[k], want[k])][:5])

    # Import: a new run starts from the adapter (its initial adapters are the file's).
    d2, rc, out = train(lora + ["--set", "lora.init_from=" + adapter, "--set", "run.dump_init=true"], steps=2)
    if rc == 0:
        init, _ = read_safetensors(os.path.join(d2, "init.safetensors"))
        same = all(torch.equal(init[k], ours[k]) for k in ours)
        check("lora.init_from: the run starts from the adapter's tensors and trains",
              same and len(metrics(d2)) == 2, [k for k in ours if not torch.equal(init[k], ours[k])])
    d3, rc, out = train(["--set", "lora.rank=8", "--set", "lora.alpha=8", "--set", "lora.targets=wq,wv",
                         "--set", "lora.init_from=" + adapter], expect_ok=False)
    check("lora.init_from with another rank: refused naming r", rc != 0 and "r = 4" in out, out)

    # Model-only checkpoints: parameters without AdamW moments or RNG state; resuming refused.
    d4, rc, _ = train(["--set", "train.save_model_only=true"], steps=2)
    if rc == 0:
        ck = os.path.join(d4, "checkpoints")
        latest = open(os.path.join(ck, "latest")).read().strip() if os.path.isfile(os.path.join(ck, "latest")) \
            else sorted(x for x in os.listdir(ck) if x.startswith("step"))[-1]
        shard_files = [f for f in os.listdir(os.path.join(ck, latest)) if f.endswith(".safetensors")]
        names = set()
        for f in shard_files:
            names |= set(read_safetensors(os.path.join(ck, latest, f))[0])
        check("train.save_model_only: shard files hold .param only (no exp_avg, no rng)",
              len(shard_files) == 2 and names and all(n.endswith(".param") for n in names), sorted(names)[:8])
        rc, out = zs("train", "--nproc", "2", *SMALL, "--set", "train.steps=3", "--resume", d4)
        check("--resume from a model-only checkpoint: refused", rc != 0 and "parameters only" in out, out)
        rc, out = zs("export", d4, os.path.join(TMP, "mo.safetensors"))
        check("model-only checkpoint exports", rc == 0, out)


def part_plan():
    # Every strategy at 2 and 3 ranks (3: shards padded to a multiple of 3) with 2 micro-batches
    # per step, rank by rank, against what each rank's metrics.jsonl line measured; and ZeRO-3
    # in bf16 with the root (about 12,300 parameters; a layer about 21,400) kept replicated by the
    # persistence threshold, so its step both publishes the root and prefetches layers.
    cases = [(nproc, strategy, []) for nproc in (2, 3)
             for strategy in ["no_shard", "optim", "optim_grads", "optim_grads_params"]]
    cases.append((3, "optim_grads_params", ["--set", "mixed_precision.param_dtype=bf16", "--set",
                                            "mixed_precision.reduce_dtype=bf16", "--set",
                                            "parallel.persistence_threshold=15000"]))
    # no_shard in bf16 casts each unit's compute copy from its full fp32 master when it runs (no
    # persistent bf16 copy): params are the masters alone, and the cast copies alive at once (the
    # root and one layer) are its gathered peak.
    cases.append((2, "no_shard", ["--set", "mixed_precision.param_dtype=bf16"]))
    for nproc, strategy, extra in cases:
        accum = ["--set", "train.grad_accum=2"] + extra
        d, rc, _ = train(["--set", "parallel.strategy=" + strategy] + accum, nproc=nproc, steps=3)
        if rc != 0:
            continue
        rc, out = zs("plan", *SMALL, *accum, "--nproc", str(nproc), "--strategy", strategy, "--json")
        name = "plan --nproc %d --strategy %s%s" % (nproc, strategy, " " + " ".join(extra[1::2]) if extra else "")
        if not check(name, rc == 0, out):
            continue
        plan = json.loads(out)["strategies"][0]
        steps = metrics(d)
        pairs = [("params_bytes", "mem_params_bytes"), ("grads_bytes", "mem_grads_bytes"),
                 ("optim_bytes", "mem_optim_bytes")]
        if strategy == "optim_grads_params" or "mixed_precision.param_dtype=bf16" in extra:
            pairs.append(("gathered_peak_bytes", "mem_gathered_peak_bytes"))
        bad = []
        for r, rank in enumerate(steps[-1]["ranks"]):
            for p, m in pairs:
                if abs(plan[p] - rank[m]) > 0.01 * max(rank[m], 1):
                    bad.append("rank %d %s: plan %d measured %d" % (r, p, plan[p], rank[m]))
        check("%s within 1%% of the measured model state (params, grads, optimizer, gathered peak)" % name,
              not bad, bad)

        # Bytes sent. A step's comm_bytes_sent is read right after the optimizer step, so of
        # the all-gathers issued there and waited by the next forward (plan's deferred ones)
        # it holds the ring steps that had completed by then: plan's bytes less the deferred
        # ones, plus a whole number (0 .. nproc-1) of ring steps of each deferred all-gather.
        # Step 1 is left out: under optim_grads_params it gathers its first units itself.
        base = plan["comm_bytes_per_step"] - plan["comm_deferred_bytes"]
        reachable = {0}
        for chunk in plan["comm_deferred_chunk_bytes"]:
            reachable = {x + k * chunk for x in reachable for k in range(nproc)}
        bad = []
        for m in steps[1:]:
            for r, rank in enumerate(m["ranks"]):
                if rank["comm_bytes_sent"] - base not in reachable:
                    bad.append("step %d rank %d: measured %d, plan %d of which %d deferred (chunks %s)" % (
                        m["step"], r, rank["comm_bytes_sent"], plan["comm_bytes_per_step"],
                        plan["comm_deferred_bytes"], plan["comm_deferred_chunk_bytes"]))
        # Which collectives are deferred is part of what is checked: none without replicated
        # parameters to publish or units to prefetch (no_shard), some in the other three.
        deferred_ok = (plan["comm_deferred_bytes"] == 0) == (strategy == "no_shard")
        check("%s: bytes sent per step exactly as measured (steps 2-3, every rank)" % name,
              not bad and len(steps) == 3 and deferred_ok, (bad, len(steps), plan["comm_deferred_bytes"]))


def part_mfu():
    d, rc, _ = train(["--set", "run.dump_init=true"], steps=3)
    if rc != 0:
        return
    init, _ = read_safetensors(os.path.join(d, "init.safetensors"))
    cfg = json.load(open(os.path.join(d, "config.json"))) if os.path.exists(os.path.join(d, "config.json")) else None
    # Matmul weights: every 2-D weight but the token embedding (a lookup); a tied output
    # projection (no separate weight) still multiplies: counted once more.
    embed = [k for k in init if "embed" in k and init[k].dim() == 2]
    outputs = [k for k in init if k.startswith("output") or k.startswith("lm_head")]
    weights = sum(t.numel() for k, t in init.items() if t.dim() == 2 and k not in embed)
    if not outputs:
        weights += sum(init[k].numel() for k in embed)
    layers, heads, head_dim, seq = 2, 4, 48 // 4, 32
    flops_per_token = 6 * weights + 12 * layers * heads * head_dim * seq
    ok, detail = True, []
    for m in metrics(d):
        want = flops_per_token * m["tokens_per_s"] / 2 / 1e12
        if not ("tflops_per_rank" in m and abs(m["tflops_per_rank"] - want) <= 1e-9 * want and 0 < m["mfu"]):
            ok = False
            detail.append((m.get("tflops_per_rank"), want, m.get("mfu")))
    check("metrics.jsonl: tflops_per_rank = 6 x matmul weights + attention per token x tokens/s / ranks; mfu > 0",
          ok, (embed, outputs, weights, detail))


for part in PARTS:
    {"foreign": part_foreign, "tb": part_tb, "peft": part_peft, "plan": part_plan, "mfu": part_mfu}[part]()
if FAILED:
    print("test_user_formats: %d failed: %s" % (len(FAILED), ", ".join(FAILED)))
    sys.exit(1)
print("test_user_formats: all checks passed")
subprocess.run(["rm", "-rf", TMP])
