#!/usr/bin/env python3
"""Independent PyTorch (Python) implementations of the model zoo's series, written from the
papers and model cards, not from zeroshard's C++: the model-level reference tests feed them
the same weights and inputs and compare loss, auxiliary values and every gradient.

  reference.py moe CASE.safetensors

CASE holds param.<name> (weights), grad.<name> (zeroshard's gradients; zeros where zeroshard
had none), tokens [B, T+1] (int64 as float64), loss, aux_loss, and the model config as JSON in
__metadata__["config"]. Exit 0 when everything matches within float tolerance, 1 otherwise.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from safetensors_io import read_file, read_header  # noqa: E402


def rms_norm(x, w, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(T, head_dim, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)  # half-split ("rotate_half") convention
    return angles.cos().float(), angles.sin().float()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def attention(x, p, pre, cfg, cos, sin):
    B, T, D = x.shape
    H, Hkv = cfg["n_heads"], cfg["n_kv_heads"]
    hd = D // H
    q = (x @ p[pre + "wq.weight"].T).view(B, T, H, hd).transpose(1, 2)
    k = (x @ p[pre + "wk.weight"].T).view(B, T, Hkv, hd).transpose(1, 2)
    v = (x @ p[pre + "wv.weight"].T).view(B, T, Hkv, hd).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = k.repeat_interleave(H // Hkv, dim=1)  # kv head j serves q heads j*H/Hkv ...
    v = v.repeat_interleave(H // Hkv, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, D) @ p[pre + "wo.weight"].T


def swiglu(x, p, pre):
    return (F.silu(x @ p[pre + "w1.weight"].T) * (x @ p[pre + "w3.weight"].T)) @ p[pre + "w2.weight"].T


def moe_ffn(x, p, pre, cfg):
    """Top-k routing written densely: every expert runs on every token and the combine matrix
    (zero outside each token's top k) selects, so no gather/scatter is shared with the C++."""
    B, T, D = x.shape
    flat = x.reshape(-1, D)
    E, K = cfg["n_experts"], cfg["top_k"]
    probs = torch.softmax(flat @ p[pre + "gate.weight"].T, dim=-1)
    top_p, top_i = probs.topk(K, dim=-1)
    top_p = top_p / top_p.sum(-1, keepdim=True)
    combine = torch.zeros_like(probs).scatter(1, top_i, top_p)  # [N, E]
    out = sum(combine[:, e:e + 1] * swiglu(flat, p, f"{pre}experts.{e}.") for e in range(E))
    if cfg["shared_expert_hidden"] > 0:
        out = out + swiglu(flat, p, pre + "shared_expert.") * torch.sigmoid(flat @ p[pre + "shared_expert_gate.weight"].T)
    counts = torch.bincount(top_i.reshape(-1), minlength=E).float()
    aux = E * ((counts / (flat.shape[0] * K)) * probs.mean(0)).sum()  # Switch Transformer
    return out.view(B, T, D), aux, counts


def moe_lm(p, tokens, cfg):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    T = inputs.shape[1]
    cos, sin = rope_tables(T, cfg["dim"] // cfg["n_heads"], cfg["rope_theta"])
    h = p["tok_embeddings.weight"][inputs]
    aux_total, counts = 0.0, []
    for i in range(cfg["n_layers"]):
        pre = f"layers.{i}."
        h = h + attention(rms_norm(h, p[pre + "attention_norm.weight"], cfg["norm_eps"]), p, pre + "attention.", cfg, cos, sin)
        out, aux, c = moe_ffn(rms_norm(h, p[pre + "ffn_norm.weight"], cfg["norm_eps"]), p, pre + "feed_forward.", cfg)
        h = h + out
        aux_total = aux_total + aux
        counts.append(c)
    h = rms_norm(h, p["norm.weight"], cfg["norm_eps"])
    w_out = p["tok_embeddings.weight"] if cfg["tie_embeddings"] else p["output.weight"]
    logits = h @ w_out.T
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return loss, aux_total, torch.stack(counts)


def compare(name, ours, theirs, rtol, failures):
    scale = max(theirs.abs().max().item(), 1e-12)
    err = (ours - theirs).abs().max().item() / scale
    if not err <= rtol:
        failures.append(f"{name}: max |diff| / max |ref| = {err:.3g} > {rtol:g}")
    return err


def check_moe(path):
    case = read_file(path)
    cfg = json.loads(read_header(path)[0]["__metadata__"]["config"])
    params = {k[len("param."):]: v.clone().requires_grad_(True) for k, v in case.items() if k.startswith("param.")}
    tokens = case["tokens"].long()
    loss, aux, counts = moe_lm(params, tokens, cfg)
    (loss + cfg["aux_loss_coef"] * aux).backward()
    failures = []
    worst = compare("loss", case["loss"], loss.detach(), 1e-5, failures)
    compare("aux_loss", case["aux_loss"], aux.detach(), 1e-5, failures)
    idle = int((counts == 0).sum())
    for name, p in params.items():
        worst = max(worst, compare("grad of " + name, case["grad." + name], p.grad, 1e-4, failures))
    print(f"moe reference: loss {loss.item():.7f} (zeroshard {case['loss'].item():.7f}), aux {aux.item():.6f}, "
          f"{len(params)} gradients, {idle} idle (block, expert) pairs, worst relative difference {worst:.3g}")
    for f in failures:
        print("MISMATCH " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("moe",):
        print(__doc__)
        sys.exit(2)
    sys.exit(check_moe(sys.argv[2]))
