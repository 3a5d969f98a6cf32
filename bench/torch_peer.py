#!/usr/bin/python3
"""PyTorch reference peer for zeroshard: trains the same Llama-style byte-level
model from a zeroshard run directory with DDP (+ optional ZeroRedundancyOptimizer)
on CPU/gloo and appends per-step and summary JSON lines to a results file.

Run with Debian's interpreter (the one that has torch):
  /usr/bin/python3 bench/torch_peer.py --mode ddp --run-dir RUN --nproc 2 --out results.jsonl
Without RANK in the environment the script is a launcher: it spawns --nproc ranks
of itself (torchrun is not used) and kills all of them if one fails.
"""
import argparse
import contextlib
import datetime
import json
import math
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

REQUIRED = {
    "model": ["vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden",
              "norm_eps", "rope_theta", "tie_embeddings", "max_seq_len"],
    "train": ["steps", "micro_batch_size", "grad_accum", "seq_len", "lr", "min_lr",
              "warmup_steps", "weight_decay", "beta1", "beta2", "eps", "clip_grad_norm"],
}
ST_DTYPES = {"F32": ("<f4", 4), "F64": ("<f8", 8), "F16": ("<f2", 2), "BF16": ("<u2", 2)}


class InputError(Exception):
    pass


# ----------------------------------------------------------------------------- inputs
def load_config(run_dir):
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise InputError(f"{path}: file not found")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot parse JSON: {e}")
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: top level must be a JSON object")
    for sect, keys in REQUIRED.items():
        if not isinstance(cfg.get(sect), dict):
            raise InputError(f"{path}: missing or non-object key '{sect}'")
        for k in keys:
            if k not in cfg[sect]:
                raise InputError(f"{path}: missing key '{sect}.{k}'")
            v = cfg[sect][k]
            if isinstance(v, bool) != (k == "tie_embeddings") or not isinstance(v, (int, float)):
                raise InputError(f"{path}: key '{sect}.{k}' has invalid value {v!r}")
    m, t = cfg["model"], cfg["train"]
    for sect, keys in (("model", REQUIRED["model"][:6] + ["max_seq_len"]),
                       ("train", ["steps", "micro_batch_size", "grad_accum", "seq_len"])):
        for k in keys:
            if not isinstance(cfg[sect][k], int) or cfg[sect][k] <= 0:
                raise InputError(f"{path}: key '{sect}.{k}' must be a positive integer")
    if not isinstance(t["warmup_steps"], int) or t["warmup_steps"] < 0:
        raise InputError(f"{path}: key 'train.warmup_steps' must be a non-negative integer")
    if m["dim"] % m["n_heads"] or (m["dim"] // m["n_heads"]) % 2:
        raise InputError(f"{path}: model.dim must be divisible by model.n_heads with an even head dim")
    if m["n_heads"] % m["n_kv_heads"]:
        raise InputError(f"{path}: model.n_heads must be divisible by model.n_kv_heads")
    if t["seq_len"] > m["max_seq_len"]:
        raise InputError(f"{path}: train.seq_len {t['seq_len']} > model.max_seq_len {m['max_seq_len']}")
    return cfg


def read_safetensors(path, want_data=True):
    """Returns {name: (shape, numpy float32 array or None)}."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: file not found")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise InputError(f"{path}: truncated (no 8-byte header length)")
        n = int.from_bytes(head, "little")
        if n > size - 8:
            raise InputError(f"{path}: header length {n} exceeds file size {size}")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise InputError(f"{path}: header is not valid JSON: {e}")
        data = f.read() if want_data else None
    data_len = size - 8 - n
    if not isinstance(header, dict):
        raise InputError(f"{path}: header must be a JSON object")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = info["dtype"], [int(x) for x in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{path}: tensor '{name}': malformed header entry {info!r}")
        if dtype not in ST_DTYPES:
            raise InputError(f"{path}: tensor '{name}': unsupported dtype {dtype}")
        np_dt, isz = ST_DTYPES[dtype]
        numel = math.prod(shape)
        if not (0 <= b <= e <= data_len) or e - b != numel * isz:
            raise InputError(f"{path}: tensor '{name}': data_offsets [{b},{e}] inconsistent with "
                             f"shape {shape} x {dtype} / data section of {data_len} bytes")
        arr = None
        if want_data:
            arr = np.frombuffer(data, dtype=np_dt, count=numel, offset=b)
            if dtype == "BF16":
                arr = (arr.astype(np.uint32) << 16).view(np.float32)
            arr = arr.astype(np.float32).reshape(shape)
        out[name] = (shape, arr)
    return out


def expected_shapes(m):
    hd = m["dim"] // m["n_heads"]
    d, f, V = m["dim"], m["ffn_hidden"], m["vocab_size"]
    s = {"tok_embeddings.weight": [V, d], "norm.weight": [d]}
    for i in range(m["n_layers"]):
        p = f"layers.{i}."
        s.update({p + "attention_norm.weight": [d], p + "ffn_norm.weight": [d],
                  p + "attention.wq.weight": [m["n_heads"] * hd, d],
                  p + "attention.wk.weight": [m["n_kv_heads"] * hd, d],
                  p + "attention.wv.weight": [m["n_kv_heads"] * hd, d],
                  p + "attention.wo.weight": [d, m["n_heads"] * hd],
                  p + "feed_forward.w1.weight": [f, d], p + "feed_forward.w3.weight": [f, d],
                  p + "feed_forward.w2.weight": [d, f]})
    if not m["tie_embeddings"]:
        s["output.weight"] = [V, d]
    return s


def check_weights(path, tensors, m):
    check_shapes(path, tensors, expected_shapes(m))


def check_shapes(path, tensors, exp):
    """Raises InputError naming `path` unless `tensors` ({name: (shape, data)}) holds exactly the
    names of `exp` ({name: shape}) with those shapes."""
    missing = sorted(set(exp) - set(tensors))
    extra = sorted(set(tensors) - set(exp))
    bad = [f"{k}: file {tensors[k][0]} vs expected {exp[k]}" for k in exp
           if k in tensors and list(tensors[k][0]) != exp[k]]
    if missing or extra or bad:
        raise InputError(f"{path}: weights do not match config model (missing={missing}, "
                         f"unexpected={extra}, shape mismatches={bad})")


def batches_path(run_dir, rank):
    return os.path.join(run_dir, f"batches.rank{rank}.bin")


def check_batches(run_dir, rank, t, steps):
    path = batches_path(run_dir, rank)
    if not os.path.isfile(path):
        raise InputError(f"{path}: file not found")
    want = t["steps"] * t["grad_accum"] * t["micro_batch_size"] * (t["seq_len"] + 1) * 8
    got = os.path.getsize(path)
    if got != want:
        raise InputError(f"{path}: size {got} bytes != train.steps*grad_accum*micro_batch_size*"
                         f"(seq_len+1)*8 = {t['steps']}*{t['grad_accum']}*{t['micro_batch_size']}*"
                         f"{t['seq_len'] + 1}*8 = {want} bytes")
    if steps > t["steps"]:
        raise InputError(f"{path}: holds {t['steps']} steps (train.steps) but --steps {steps} requested")
    return path


def validate(args):
    cfg = load_config(args.run_dir)
    steps = args.steps or cfg["train"]["steps"]
    wpath = os.path.join(args.run_dir, "init.safetensors")
    check_weights(wpath, read_safetensors(wpath, want_data=False), cfg["model"])
    for r in range(args.nproc):
        check_batches(args.run_dir, r, cfg["train"], steps)
    ws = cfg.get("world_size")
    if ws is not None and ws != args.nproc:
        print(f"torch_peer: warning: config world_size={ws} but --nproc {args.nproc}", file=sys.stderr)
    return cfg, steps


# ----------------------------------------------------------------------------- model
def build_model(m):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return y.to(x.dtype) * self.weight

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.H, self.Hkv, self.hd = m["n_heads"], m["n_kv_heads"], m["dim"] // m["n_heads"]
            self.wq = nn.Linear(m["dim"], self.H * self.hd, bias=False)
            self.wk = nn.Linear(m["dim"], self.Hkv * self.hd, bias=False)
            self.wv = nn.Linear(m["dim"], self.Hkv * self.hd, bias=False)
            self.wo = nn.Linear(self.H * self.hd, m["dim"], bias=False)

        def forward(self, x, cos, sin, mask):
            B, T, _ = x.shape
            q = self.wq(x).view(B, T, self.H, self.hd).transpose(1, 2)
            k = self.wk(x).view(B, T, self.Hkv, self.hd).transpose(1, 2)
            v = self.wv(x).view(B, T, self.Hkv, self.hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            rep = self.H // self.Hkv
            if rep > 1:
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
            scores = scores.float().masked_fill(mask, float("-inf"))
            probs = torch.softmax(scores, dim=-1).to(v.dtype)
            out = (probs @ v).transpose(1, 2).reshape(B, T, self.H * self.hd)
            return self.wo(out)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm = RMSNorm(m["dim"], m["norm_eps"])
            self.attention = Attention()
            self.ffn_norm = RMSNorm(m["dim"], m["norm_eps"])
            self.feed_forward = ff = nn.Module()  # w1 gate, w3 up, w2 down
            ff.w1 = nn.Linear(m["dim"], m["ffn_hidden"], bias=False)
            ff.w3 = nn.Linear(m["dim"], m["ffn_hidden"], bias=False)
            ff.w2 = nn.Linear(m["ffn_hidden"], m["dim"], bias=False)

        def forward(self, x, cos, sin, mask):
            h = x + self.attention(self.attention_norm(x), cos, sin, mask)
            y, ff = self.ffn_norm(h), self.feed_forward
            return h + ff.w2(F.silu(ff.w1(y)) * ff.w3(y))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(m["vocab_size"], m["dim"])
            self.layers = nn.ModuleList([Block() for _ in range(m["n_layers"])])
            self.norm = RMSNorm(m["dim"], m["norm_eps"])
            if not m["tie_embeddings"]:
                self.output = nn.Linear(m["dim"], m["vocab_size"], bias=False)
            self._rope = {}  # T -> (cos, sin, mask); plain attribute, not a buffer (DDP won't sync it)

        def rope(self, T):
            if T not in self._rope:
                hd = m["dim"] // m["n_heads"]
                inv = 1.0 / (m["rope_theta"] ** (torch.arange(0, hd // 2, dtype=torch.float32) * 2 / hd))
                ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)
                cos = torch.cat([ang.cos(), ang.cos()], -1)
                sin = torch.cat([ang.sin(), ang.sin()], -1)
                mask = torch.ones(T, T, dtype=torch.bool).triu(1)
                self._rope[T] = (cos, sin, mask)
            return self._rope[T]

        def forward(self, tokens, targets):
            cos, sin, mask = self.rope(tokens.shape[1])
            h = self.tok_embeddings(tokens)
            for layer in self.layers:
                h = layer(h, cos, sin, mask)
            w = self.tok_embeddings.weight if m["tie_embeddings"] else self.output.weight
            logits = F.linear(self.norm(h), w)
            return F.cross_entropy(logits.view(-1, m["vocab_size"]).float(), targets.reshape(-1))

    return Transformer()


# ----------------------------------------------------------------------------- rank
def warmup_steps(args, steps):
    """Steps left out of the median: --warmup, or 2 when there are more than 4 steps."""
    if args.warmup >= 0:
        return min(args.warmup, steps - 1)
    return 2 if steps > 4 else 0


def lr_at(s, t, steps):
    lr_max, lr_min, warm = t["lr"], t["min_lr"], t["warmup_steps"]
    if s <= warm:
        return lr_max * s / warm
    p = (s - warm) / max(1, steps - warm)
    return lr_min + 0.5 * (lr_max - lr_min) * (1 + math.cos(math.pi * p))


def train_steps(args, model, t, steps, peer, micro_loss):
    """DDP (+ ZeroRedundancyOptimizer with --mode zero) training of `model` for `steps` steps of
    t["grad_accum"] micro-batches, micro_loss(ddp, step, micro) giving each loss: AdamW with the
    run's hyperparameters, schedule and clipping, fp32 or under bf16 autocast. Every rank
    returns the per-step records (loss averaged over ranks, wall time between barriers)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    world, rank = dist.get_world_size(), dist.get_rank()
    ddp = DDP(model)
    opt_kw = dict(lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["eps"], weight_decay=t["weight_decay"])
    if args.mode == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, **opt_kw)
    else:
        opt = torch.optim.AdamW(ddp.parameters(), **opt_kw)
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.bf16 else contextlib.nullcontext
    prec = "bf16" if args.bf16 else "fp32"
    ga, clip = t["grad_accum"], float(t["clip_grad_norm"])
    records = []
    for s in range(1, steps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for mi in range(ga):
            with (ddp.no_sync() if mi < ga - 1 else contextlib.nullcontext()):
                with amp():
                    loss = micro_loss(ddp, s, mi)
                (loss.float() / ga).backward()
            loss_sum += loss.item()
        params = [p for p in model.parameters() if p.grad is not None]
        if clip > 0:
            gnorm = float(torch.nn.utils.clip_grad_norm_(params, clip))
        else:
            gnorm = float(torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(p.grad.detach()) for p in params])))
        lr = lr_at(s, t, steps)
        for g in opt.param_groups:
            g["lr"] = lr
        t_opt = time.perf_counter()
        opt.step()
        opt_s = time.perf_counter() - t_opt
        dist.barrier()
        dt = time.perf_counter() - t0
        lt = torch.tensor([loss_sum / ga], dtype=torch.float64)
        dist.all_reduce(lt)
        rec = {"peer": peer, "precision": prec, "step": s, "loss": float(lt.item()) / world,
               "lr": lr, "grad_norm": gnorm, "step_time_s": dt, "optimizer_s": opt_s}
        records.append(rec)
        if rank == 0 and not args.quiet:
            print(f"[{peer}/{prec}] step {s:4d} loss {rec['loss']:.6f} lr {lr:.3e} "
                  f"gnorm {gnorm:.4f} {dt * 1e3:.1f} ms", flush=True)
    return records


def start_rank():
    """Inside a spawned rank: (rank, world) from the launcher's environment, and this rank's
    share of the cores as torch's intra-op threads."""
    import torch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    return rank, world


def summarize(args, records, peer, steps, item, per_step, **extra):
    """The summary line every peer writes after its per-step records (a collective: every rank
    calls it, for the peak RSS): median step and optimizer time after the warm-up steps,
    `item`s per step and per second, peak RSS per rank, and `extra`."""
    import torch.distributed as dist

    all_rss = rss_per_rank()
    timed = records[warmup_steps(args, steps):]
    med = statistics.median(r["step_time_s"] for r in timed)
    return {"peer": peer, "precision": "bf16" if args.bf16 else "fp32", "summary": True, "mode": args.mode,
            "world_size": dist.get_world_size(), "steps": steps, f"{item}_per_step": per_step,
            "median_step_time_s": med, f"{item}_per_s": per_step / med if med > 0 else None,
            "median_optimizer_s": statistics.median(r["optimizer_s"] for r in timed),
            "rss_peak_bytes_per_rank": all_rss, **extra}


def rss_per_rank():
    """Every rank's peak RSS in bytes, in rank order (a collective: every rank calls it)."""
    import torch
    import torch.distributed as dist

    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024], dtype=torch.int64)
    all_rss = [torch.zeros_like(rss) for _ in range(dist.get_world_size())]
    dist.all_gather(all_rss, rss)
    return [int(x.item()) for x in all_rss]


def append_results(path, records, summary):
    """Appends the per-step records and the summary to the JSONL file `path` (rank 0 only)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        for r in records + [summary]:
            f.write(json.dumps(r) + "\n")


def run_rank(args):
    import torch
    import torch.distributed as dist

    rank, world = start_rank()
    cfg = load_config(args.run_dir)
    m, t = cfg["model"], cfg["train"]
    steps = args.steps or t["steps"]
    wpath = os.path.join(args.run_dir, "init.safetensors")
    tensors = read_safetensors(wpath)
    check_weights(wpath, tensors, m)
    bpath = check_batches(args.run_dir, rank, t, steps)
    ga, mbs, T = t["grad_accum"], t["micro_batch_size"], t["seq_len"]
    data = np.fromfile(bpath, dtype="<i8").reshape(t["steps"], ga, mbs, T + 1)
    if data.size and (data.min() < 0 or data.max() >= m["vocab_size"]):
        raise InputError(f"{bpath}: token ids outside [0, {m['vocab_size']}) "
                         f"(min {data.min()}, max {data.max()})")
    batches = torch.from_numpy(data.astype(np.int64))

    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    model = build_model(m)
    model.load_state_dict({k: torch.from_numpy(a) for k, (_, a) in tensors.items()}, strict=True)
    del tensors
    records = train_steps(args, model, t, steps, f"torch_{args.mode}",
                          lambda ddp, s, mi: ddp(batches[s - 1, mi][:, :-1], batches[s - 1, mi][:, 1:]))
    prec = "bf16" if args.bf16 else "fp32"
    peer = f"torch_{args.mode}"

    summary = summarize(args, records, peer, steps, "tokens", world * ga * mbs * T,
                        loss_at={str(k): records[k - 1]["loss"] for k in sorted({1, 10, 30, steps}) if k <= steps})
    if rank == 0:
        append_results(args.out, records, summary)
        print(f"[{peer}/{prec}] median step {summary['median_step_time_s'] * 1e3:.1f} ms, {summary['tokens_per_s']:.0f} tok/s, "
              f"rss {summary['rss_peak_bytes_per_rank']} -> appended {len(records) + 1} lines to {args.out}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


# ----------------------------------------------------------------------------- launcher
def launch(args, check=None, script=None):
    """Spawns args.nproc ranks of `script` (this file by default) after check(args)."""
    (check or validate)(args)  # fail fast with a clear message before spawning anything
    script = os.path.abspath(script or __file__)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.nproc):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        # As torchrun does: one compute thread share per rank, for OpenMP and OpenBLAS alike
        # (torch.set_num_threads leaves OpenBLAS's pool at one thread per core).
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.nproc)))
        procs.append(subprocess.Popen([sys.executable, script] + sys.argv[1:], env=env))
    deadline, failed = time.monotonic() + args.timeout, None
    try:
        while failed is None and None in [p.poll() for p in procs]:  # poll all: no short-circuit
            bad = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if bad:
                failed = f"rank {bad[0][0]} exited with code {bad[0][1]}"
            elif time.monotonic() > deadline:
                failed = f"timed out after {args.timeout} s"
            time.sleep(0.1)
    except KeyboardInterrupt:
        failed = "interrupted"
    bad = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
    if not (failed or bad):
        return 0
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill(), p.wait()
    print(f"torch_peer: {failed or f'rank {bad[0][0]} exited with code {bad[0][1]}'}; all ranks stopped",
          file=sys.stderr)
    return 1


def peer_main(description, run_rank, check, script, name):
    """The command line every peer shares: spawns the ranks (after check(args)) or, inside a rank
    (RANK set), runs run_rank(args). Bad inputs exit 2 with the message, prefixed by `name`."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", required=True, choices=["ddp", "zero"],
                    help="ddp: DDP + AdamW; zero: DDP + ZeroRedundancyOptimizer(AdamW)")
    ap.add_argument("--run-dir", required=True, help="zeroshard run directory")
    ap.add_argument("--nproc", type=int, default=2, help="number of ranks to spawn (default 2)")
    ap.add_argument("--steps", type=int, default=0,
                    help="optimizer steps to run (default: config train.steps; must not exceed it)")
    ap.add_argument("--out", required=True, help="JSONL results file (appended to by rank 0)")
    ap.add_argument("--bf16", action="store_true",
                    help="run forward+loss under torch.autocast('cpu', bfloat16)")
    ap.add_argument("--timeout", type=float, default=3600,
                    help="launcher: kill all ranks after this many seconds (default 3600)")
    ap.add_argument("--quiet", action="store_true", help="no per-step progress on stdout")
    ap.add_argument("--warmup", type=int, default=-1,
                    help="first steps left out of the median (default: 2 when steps > 4, else 0)")
    args = ap.parse_args()
    if args.nproc < 1 or args.steps < 0:
        ap.error("--nproc must be >= 1 and --steps >= 0")
    try:
        if "RANK" in os.environ:
            run_rank(args)
            # torch 1.13's gloo threads can abort interpreter teardown ("terminate called
            # without an active exception") after ZeroRedundancyOptimizer runs; the results are
            # written and the group destroyed, so leave without the teardown.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        return launch(args, check=check, script=script)
    except InputError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return 2


def main():
    return peer_main("PyTorch DDP / ZeRO-1 reference peer for zeroshard (CPU, gloo). Trains the model described by "
                     "RUN_DIR/config.json from RUN_DIR/init.safetensors on RUN_DIR/batches.rank{r}.bin and appends "
                     "JSON lines to --out.", run_rank, validate, __file__, "torch_peer")


if __name__ == "__main__":
    sys.exit(main())
