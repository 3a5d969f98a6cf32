#!/usr/bin/python3
"""PyTorch peer for the qwen3 series: trains the dense Qwen3 model of a zeroshard run directory
with DDP (or DDP + ZeroRedundancyOptimizer) on CPU/gloo, in fp32 or under bf16 autocast, on the
run's own batches, and appends per-step and summary JSON lines to --out — the qwen3 rows of
bench/speed_suite.py.

  /usr/bin/python3 bench/torch_qwen3_peer.py --mode ddp|zero --run-dir RUN --nproc 2 \\
      --out results.jsonl [--steps N] [--warmup K] [--bf16]

RUN comes from `zeroshard train` with run.dump_init=true and run.dump_batches=true:
  config.json            model.* (Qwen3's config.json keys), train.*
  init.safetensors       the initial weights under the released names (model.embed_tokens.weight,
                         model.layers.N.self_attn.q_proj.weight, ...; lm_head.weight when untied)
  batches.rank{r}.bin    per step and micro-batch, int64 [micro_batch_size, seq_len] each: input
                         ids, labels (-100: no target), segment ids (0: padding), position ids
The model is written here from Qwen3's description (transformers' Qwen3ForCausalLM): RMSNorm in
fp32 before the weight, q/k RMSNorm per head before RoPE, GQA, SwiGLU, tied or untied head.
Attention stays inside each segment (packed sequences) and is causal. The loss is the step's
summed cross-entropy over the targets of every rank and micro-batch divided by their count, as
zeroshard's qwen3 task computes it; so fp32 losses agree with zeroshard's to float32 rounding.
"""
import datetime
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_peer  # noqa: E402  (read_safetensors, launch, train_steps, warmup_steps, InputError)

InputError = torch_peer.InputError
MODEL_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "tie_word_embeddings")
TRAIN_KEYS = ("steps", "micro_batch_size", "grad_accum", "seq_len", "lr", "min_lr", "warmup_steps", "weight_decay",
              "beta1", "beta2", "eps", "clip_grad_norm")
ARRAYS = 4  # input ids, labels, segment ids, position ids


def load_config(run_dir):
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise InputError(f"{path}: file not found")
    try:
        cfg = json.load(open(path))
    except ValueError as e:
        raise InputError(f"{path}: cannot parse JSON: {e}")
    m, t = cfg.get("model", {}), cfg.get("train", {})
    if m.get("series") != "qwen3":
        raise InputError(f"{path}: model.series is {m.get('series')!r}; this peer trains the 'qwen3' series")
    for sect, keys, d in (("model", MODEL_KEYS, m), ("train", TRAIN_KEYS, t)):
        for k in keys:
            if k not in d:
                raise InputError(f"{path}: missing key '{sect}.{k}'")
    if m.get("num_experts", 0):
        raise InputError(f"{path}: model.num_experts is {m['num_experts']}: this peer has the dense Qwen3 only")
    if m.get("attention_bias", False):
        raise InputError(f"{path}: model.attention_bias is true: this peer has Qwen3's bias-free projections only")
    if m["num_attention_heads"] % m["num_key_value_heads"]:
        raise InputError(f"{path}: model.num_attention_heads must be a multiple of model.num_key_value_heads")
    return cfg


def expected_shapes(m):
    d, hd, V, f = m["hidden_size"], m["head_dim"], m["vocab_size"], m["intermediate_size"]
    H, Hkv = m["num_attention_heads"], m["num_key_value_heads"]
    s = {"model.embed_tokens.weight": [V, d], "model.norm.weight": [d]}
    for i in range(m["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s.update({p + "input_layernorm.weight": [d], p + "post_attention_layernorm.weight": [d],
                  p + "self_attn.q_proj.weight": [H * hd, d], p + "self_attn.k_proj.weight": [Hkv * hd, d],
                  p + "self_attn.v_proj.weight": [Hkv * hd, d], p + "self_attn.o_proj.weight": [d, H * hd],
                  p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
                  p + "mlp.gate_proj.weight": [f, d], p + "mlp.up_proj.weight": [f, d], p + "mlp.down_proj.weight": [d, f]})
    if not m["tie_word_embeddings"]:
        s["lm_head.weight"] = [V, d]
    return s


def check_weights(path, tensors, m):
    torch_peer.check_shapes(path, tensors, expected_shapes(m))


def read_batches(run_dir, rank, t, steps, vocab):
    """This rank's dumped batches as int64 [train.steps, grad_accum, 4, micro_batch_size, seq_len]."""
    path = os.path.join(run_dir, f"batches.rank{rank}.bin")
    if not os.path.isfile(path):
        raise InputError(f"{path}: file not found (run zeroshard with run.dump_batches=true)")
    shape = (t["steps"], t["grad_accum"], ARRAYS, t["micro_batch_size"], t["seq_len"])
    want = math.prod(shape) * 8
    if os.path.getsize(path) != want:
        raise InputError(f"{path}: {os.path.getsize(path)} bytes; train.steps x grad_accum x 4 arrays x "
                         f"micro_batch_size x seq_len x 8 = {' x '.join(map(str, shape))} x 8 = {want}")
    if steps > t["steps"]:
        raise InputError(f"{path}: holds {t['steps']} steps (train.steps) but --steps {steps} requested")
    data = np.fromfile(path, dtype="<i8").reshape(shape)
    ids, labels = data[:, :, 0], data[:, :, 1]
    if ids.min() < 0 or ids.max() >= vocab:
        raise InputError(f"{path}: input ids outside [0, {vocab}) (min {ids.min()}, max {ids.max()})")
    bad = (labels != -100) & ((labels < 0) | (labels >= vocab))
    if bad.any():
        raise InputError(f"{path}: {int(bad.sum())} labels are neither -100 nor in [0, {vocab})")
    return data


def validate(args):
    cfg = load_config(args.run_dir)
    steps = args.steps or cfg["train"]["steps"]
    wpath = os.path.join(args.run_dir, "init.safetensors")
    check_weights(wpath, torch_peer.read_safetensors(wpath, want_data=False), cfg["model"])
    for r in range(args.nproc):
        read_batches(args.run_dir, r, cfg["train"], steps, cfg["model"]["vocab_size"])
    if cfg.get("world_size") not in (None, args.nproc):
        raise InputError(f"{args.run_dir}/config.json: world_size {cfg['world_size']} but --nproc {args.nproc}: "
                         f"the batches and the loss normalization are those of {cfg['world_size']} ranks")
    return cfg, steps


def build_model(m):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    d, hd, H, Hkv = m["hidden_size"], m["head_dim"], m["num_attention_heads"], m["num_key_value_heads"]

    class RMSNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x):
            xf = x.float()
            xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + m["rms_norm_eps"])
            return self.weight * xf.to(x.dtype)

    def rotate_half(x):
        return torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj = nn.Linear(d, H * hd, bias=False), nn.Linear(d, Hkv * hd, bias=False)
            self.v_proj, self.o_proj = nn.Linear(d, Hkv * hd, bias=False), nn.Linear(H * hd, d, bias=False)
            self.q_norm, self.k_norm = RMSNorm(hd), RMSNorm(hd)

        def forward(self, x, cos, sin, allowed):
            B, T, _ = x.shape
            q = self.q_norm(self.q_proj(x).view(B, T, H, hd)).transpose(1, 2)
            k = self.k_norm(self.k_proj(x).view(B, T, Hkv, hd)).transpose(1, 2)
            v = self.v_proj(x).view(B, T, Hkv, hd).transpose(1, 2)
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            if H != Hkv:
                k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
            scores = (q @ k.transpose(-2, -1)).float() * (1.0 / math.sqrt(hd))
            probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).to(v.dtype)
            return self.o_proj((probs @ v).transpose(1, 2).reshape(B, T, H * hd))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)
            self.self_attn = Attention()
            self.mlp = mlp = nn.Module()
            mlp.gate_proj, mlp.up_proj = nn.Linear(d, m["intermediate_size"], bias=False), nn.Linear(d, m["intermediate_size"], bias=False)
            mlp.down_proj = nn.Linear(m["intermediate_size"], d, bias=False)

        def forward(self, x, cos, sin, allowed):
            h = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
            y, mlp = self.post_attention_layernorm(h), self.mlp
            return h + mlp.down_proj(F.silu(mlp.gate_proj(y)) * mlp.up_proj(y))

    class Qwen3(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = body = nn.Module()
            body.embed_tokens = nn.Embedding(m["vocab_size"], d)
            body.layers = nn.ModuleList([Layer() for _ in range(m["num_hidden_layers"])])
            body.norm = RMSNorm(d)
            if not m["tie_word_embeddings"]:
                self.lm_head = nn.Linear(d, m["vocab_size"], bias=False)
            inv = 1.0 / (m["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
            self._inv_freq = inv  # plain attribute, not a buffer: DDP does not broadcast it

        def forward(self, ids, labels, segments, positions, targets_per_micro):
            # RoPE angles in float64, rounded once to float32 (as zeroshard computes them).
            ang = (positions.double().unsqueeze(-1) * self._inv_freq).float()
            ang = torch.cat([ang, ang], dim=-1).unsqueeze(1)  # [B, 1, T, hd]
            cos, sin = ang.cos(), ang.sin()
            T = ids.shape[1]
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            same = segments.unsqueeze(2) == segments.unsqueeze(1)
            real_key = (segments > 0).unsqueeze(1)
            # Padding queries see themselves only: their outputs have no target.
            allowed = (causal & same & real_key) | torch.eye(T, dtype=torch.bool)
            allowed = allowed.unsqueeze(1)  # [B, 1, T, T]
            h = self.model.embed_tokens(ids)
            for layer in self.model.layers:
                h = layer(h, cos, sin, allowed)
            w = self.model.embed_tokens.weight if m["tie_word_embeddings"] else self.lm_head.weight
            logits = F.linear(self.model.norm(h), w)
            ce = F.cross_entropy(logits.reshape(-1, m["vocab_size"]).float(), labels.reshape(-1),
                                 ignore_index=-100, reduction="sum")
            return ce / targets_per_micro

    return Qwen3()


def run_rank(args):
    import torch
    import torch.distributed as dist

    rank, world = torch_peer.start_rank()
    cfg = load_config(args.run_dir)
    m, t = cfg["model"], cfg["train"]
    steps = args.steps or t["steps"]
    ga, mbs, T = t["grad_accum"], t["micro_batch_size"], t["seq_len"]
    wpath = os.path.join(args.run_dir, "init.safetensors")
    tensors = torch_peer.read_safetensors(wpath)
    check_weights(wpath, tensors, m)
    # Each micro-batch's loss is scaled so that the W x grad_accum micro-batches average to the
    # mean over the step's targets (of every rank's batches).
    every = [read_batches(args.run_dir, r, t, steps, m["vocab_size"]) for r in range(world)]
    step_targets = sum((data[:, :, 1] != -100).reshape(t["steps"], -1).sum(1) for data in every)
    mine = torch.from_numpy(every[rank])
    del every
    per_micro = [max(1, int(n)) / (world * ga) for n in step_targets]

    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    model = build_model(m)
    model.load_state_dict({k: torch.from_numpy(a.copy()) for k, (_, a) in tensors.items()}, strict=True)
    del tensors
    peer = f"torch_qwen3_{args.mode}"

    def micro_loss(ddp, s, mi):
        ids, labels, segments, positions = mine[s - 1, mi]
        return ddp(ids, labels, segments, positions, per_micro[s - 1])

    records = torch_peer.train_steps(args, model, t, steps, peer, micro_loss)
    summary = torch_peer.summarize(args, records, peer, steps, "tokens", world * ga * mbs * T,
                                   num_params=sum(p.numel() for p in model.parameters()))
    if rank == 0:
        torch_peer.append_results(args.out, records, summary)
        print(f"[{peer}/{summary['precision']}] median step {summary['median_step_time_s']:.3f} s, "
              f"{summary['tokens_per_s']:.1f} tokens/s, "
              f"rss {summary['rss_peak_bytes_per_rank']}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    return torch_peer.peer_main(__doc__, run_rank, validate, __file__, "torch_qwen3_peer")


if __name__ == "__main__":
    sys.exit(main())
