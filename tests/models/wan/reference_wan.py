#!/usr/bin/env python3
"""Independent PyTorch reference for the Wan-style text-to-video DiT (self-attention with 3-D
RoPE, cross-attention to text, FFN, adaLN modulation; flow-matching loss), written from the
model's description, not from zeroshard's C++.

  reference_wan.py CASE.safetensors
  reference_wan.py --self-test

CASE (all F32) holds param.<name> (weights), grad.<name> (zeroshard's gradient of `loss`),
inputs x0 [B,C,T,h,w], noise [B,C,T,h,w], sigma [B], txt [B,Lt,Dt], zeroshard's pred
[B,C,T,h,w] and loss (0-dim), optionally grad_input.txt, and the config as JSON in
__metadata__["config"] (dim, n_heads, layers, ffn_hidden, patch_size, latent_channels,
text_dim, rope_theta). Checks, in float64: (1) the parameter names and shapes (both ways);
(2) pred and loss; (3) every gradient. --self-test checks RoPE-3D by hand, that positions
matter, and that a fake case passes and planted faults fail. Exit 0 when everything matches,
1 otherwise (2 on bad usage).
"""
import json
import math
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from reference_checks import compare, main, report  # noqa: E402
from safetensors_io import read_file, read_header, write_file  # noqa: E402

CONFIG_KEYS = ("dim", "n_heads", "layers", "ffn_hidden", "patch_size", "latent_channels", "text_dim", "rope_theta")
INPUTS = ("x0", "noise", "sigma", "txt")
OPTIONAL = ("grad_input.txt",)


def param_shapes(cfg):
    """Every parameter name -> shape, from the config alone."""
    D, Fh, Dt = cfg["dim"], cfg["ffn_hidden"], cfg["text_dim"]
    P = cfg["latent_channels"] * cfg["patch_size"] ** 2
    s = {}

    def lin(n, i, o):
        s[n + ".weight"], s[n + ".bias"] = [o, i], [o]

    lin("patch_embedding", P, D)
    lin("text_embedding.fc1", Dt, D), lin("text_embedding.fc2", D, D)
    lin("time_embedding.fc1", 256, D), lin("time_embedding.fc2", D, D)
    lin("time_projection", D, 6 * D)
    for i in range(cfg["layers"]):
        n = f"blocks.{i}."
        s[n + "modulation"] = [1, 6, D]
        for a in ("self_attn", "cross_attn"):
            for m in "qkvo":
                lin(f"{n}{a}.{m}", D, D)
            s[f"{n}{a}.norm_q.weight"] = s[f"{n}{a}.norm_k.weight"] = [D]
        s[n + "norm3.weight"] = s[n + "norm3.bias"] = [D]
        lin(n + "ffn.fc1", D, Fh), lin(n + "ffn.fc2", Fh, D)
    s["head.modulation"] = [1, 2, D]
    lin("head.head", D, P)
    return s


# ---- building blocks (dtype-generic: float64 for the check, float32 for the fake case) ----

def linear(p, n, x):
    return x @ p[n + ".weight"].T + p[n + ".bias"]


def ln(x):  # no affine parameters
    x = x - x.mean(-1, keepdim=True)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def gelu(x):
    return F.gelu(x, approximate="tanh")


def rotate_half(u):
    return torch.cat([-u[..., u.shape[-1] // 2:], u[..., :u.shape[-1] // 2]], dim=-1)


def rope3d(x, pos, theta):
    """x [B,H,N,hd], pos [N,3] (t, row, col): hd splits in three equal parts rotated by t, row, col."""
    d = x.shape[-1] // 3
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    out = []
    for a in range(3):
        u = x[..., a * d:(a + 1) * d]
        ang = pos[:, a].double()[:, None] * inv[None]
        ang = torch.cat([ang, ang], dim=-1)
        out.append(u * ang.cos().to(x.dtype) + rotate_half(u) * ang.sin().to(x.dtype))
    return torch.cat(out, dim=-1)


def heads(t, H):
    B, N, D = t.shape
    return t.reshape(B, N, H, D // H).transpose(1, 2)


def attention(q, k, v):
    B, H, N, hd = q.shape
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1) @ v
    return a.transpose(1, 2).reshape(B, N, H * hd)


def timestep_embedding(sigma):
    half = 128
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=sigma.dtype) / half)
    args = (sigma * 1000)[:, None] * freqs[None]
    return torch.cat([args.cos(), args.sin()], dim=-1)


def patchify(x, p):
    B, C, T, h, w = x.shape
    return (x.reshape(B, C, T, h // p, p, w // p, p).permute(0, 2, 3, 5, 1, 4, 6)
            .reshape(B, T * (h // p) * (w // p), C * p * p))


def unpatchify(t, p, C, T, h, w):
    B = t.shape[0]
    return t.reshape(B, T, h // p, w // p, C, p, p).permute(0, 4, 1, 2, 5, 3, 6).reshape(B, C, T, h, w)


def positions(T, hp, wp):
    g = torch.meshgrid(torch.arange(T), torch.arange(hp), torch.arange(wp), indexing="ij")
    return torch.stack(g, -1).reshape(-1, 3)


# ---- the model ----

def dit(p, cfg, patches, txt, sigma, pos):
    """Token-level DiT: video patches [B,N,C*p*p] -> predicted velocity tokens."""
    H, D, th, B = cfg["n_heads"], cfg["dim"], cfg["rope_theta"], patches.shape[0]
    x = linear(p, "patch_embedding", patches)
    context = linear(p, "text_embedding.fc2", gelu(linear(p, "text_embedding.fc1", txt)))
    e = linear(p, "time_embedding.fc2", F.silu(linear(p, "time_embedding.fc1", timestep_embedding(sigma))))
    e0 = linear(p, "time_projection", F.silu(e)).reshape(B, 6, D)
    for i in range(cfg["layers"]):
        n = f"blocks.{i}."
        sh_a, sc_a, g_a, sh_f, sc_f, g_f = (p[n + "modulation"] + e0).chunk(6, dim=1)
        u = ln(x) * (1 + sc_a) + sh_a
        q = heads(rms(linear(p, n + "self_attn.q", u), p[n + "self_attn.norm_q.weight"]), H)
        k = heads(rms(linear(p, n + "self_attn.k", u), p[n + "self_attn.norm_k.weight"]), H)
        v = heads(linear(p, n + "self_attn.v", u), H)
        x = x + linear(p, n + "self_attn.o", attention(rope3d(q, pos, th), rope3d(k, pos, th), v)) * g_a
        u = ln(x) * p[n + "norm3.weight"] + p[n + "norm3.bias"]
        q = heads(rms(linear(p, n + "cross_attn.q", u), p[n + "cross_attn.norm_q.weight"]), H)
        k = heads(rms(linear(p, n + "cross_attn.k", context), p[n + "cross_attn.norm_k.weight"]), H)
        v = heads(linear(p, n + "cross_attn.v", context), H)
        x = x + linear(p, n + "cross_attn.o", attention(q, k, v))
        u = ln(x) * (1 + sc_f) + sh_f
        x = x + linear(p, n + "ffn.fc2", gelu(linear(p, n + "ffn.fc1", u))) * g_f
    shift, scale = (p["head.modulation"] + e[:, None, :]).chunk(2, dim=1)
    return linear(p, "head.head", ln(x) * (1 + scale) + shift)


def forward(p, cfg, x0, noise, sigma, txt):
    """Flow-matching training step: pred [B,C,T,h,w] and loss."""
    B, C, T, h, w = x0.shape
    ps = cfg["patch_size"]
    s = sigma.reshape(B, 1, 1, 1, 1)
    x_t = (1 - s) * x0 + s * noise
    pos = positions(T, h // ps, w // ps)
    pred = unpatchify(dit(p, cfg, patchify(x_t, ps), txt, sigma, pos), ps, C, T, h, w)
    return pred, (pred - (noise - x0)).pow(2).mean()


# ---- checking ----

def check(case, cfg):
    """Returns (summary, failures) for a case dict and its config."""
    failures = [f"config key '{k}' missing" for k in CONFIG_KEYS if k not in cfg]
    if failures:
        return "bad config", failures
    D, H = cfg["dim"], cfg["n_heads"]
    if D % H or (D // H) % 6 or cfg["ffn_hidden"] < 1:
        return "bad config", [f"config: dim {D}, n_heads {H}, ffn_hidden {cfg['ffn_hidden']} (need head_dim % 6 == 0, ffn_hidden >= 1)"]
    shapes = param_shapes(cfg)
    expected = set(INPUTS) | {"pred", "loss"} | {"param." + n for n in shapes} | {"grad." + n for n in shapes}
    failures += [f"key '{k}' missing from the case" for k in sorted(expected - case.keys())]
    failures += [f"unknown key '{k}' in the case" for k in sorted(case.keys() - expected - set(OPTIONAL))]
    failures += [f"{k}: shape {list(case[k].shape)}, expected {shapes[k.split('.', 1)[1]]}" for k in sorted(case)
                 if k.split(".", 1)[0] in ("param", "grad") and k.split(".", 1)[1] in shapes
                 and list(case[k].shape) != shapes[k.split(".", 1)[1]]]
    x0 = case.get("x0", torch.empty(0))
    ps, C, Dt = cfg["patch_size"], cfg["latent_channels"], cfg["text_dim"]
    if x0.dim() != 5 or x0.shape[1] != C or x0.shape[3] % ps or x0.shape[4] % ps:
        failures.append(f"x0: shape {list(x0.shape)}, expected [B, {C}, T, h, w] with h, w % {ps} == 0")
    elif "txt" in case:
        B, Lt = x0.shape[0], case["txt"].shape[1] if case["txt"].dim() == 3 else -1
        want = {"noise": list(x0.shape), "pred": list(x0.shape), "sigma": [B], "txt": [B, Lt, Dt],
                "grad_input.txt": [B, Lt, Dt], "loss": []}
        failures += [f"{k}: shape {list(case[k].shape)}, expected {s}" for k, s in want.items() if k in case and list(case[k].shape) != s]
        if "sigma" in case and not ((case["sigma"] > 0) & (case["sigma"] < 1)).all():
            failures.append(f"sigma: values {case['sigma'].tolist()} outside (0, 1)")
    if failures:  # cannot run the model without every input and parameter in its place
        return f"case does not match the config ({len(failures)} problems)", failures
    p = {n: case["param." + n].double().requires_grad_(True) for n in shapes}
    inp = {k: case[k].double().requires_grad_(k == "txt") for k in INPUTS}
    pred, loss = forward(p, cfg, *(inp[k] for k in INPUTS))
    worst_out = compare("pred", pred, case["pred"], 1e-4, failures, unit=True)
    compare("loss", loss, case["loss"], 1e-5, failures)
    loss.backward()
    worst_grad, worst_name = max((compare("grad." + n, t.grad, case["grad." + n], 1e-4, failures, atol=1e-7), n) for n, t in p.items())
    extra = [compare(k, inp[k.split(".")[1]].grad, case[k], 1e-4, failures, atol=1e-7) for k in OPTIONAL if k in case]
    return (f"loss {loss.item():.7f} (zeroshard {case['loss'].reshape(-1)[0].item():.7f}); pred worst {worst_out:.3g}; "
            f"{len(p)} parameters, gradient worst relative {worst_grad:.3g} ({worst_name})"
            + (f"; {len(extra)} input gradients worst {max(extra):.3g}" if extra else "")), failures


def check_case(path):
    meta = read_header(path)[0].get("__metadata__", {})
    if "config" not in meta:
        return report("wan", f"{path} has no __metadata__ key 'config'", ["config"])
    return report("wan", *check(read_file(path), json.loads(meta["config"])))


def self_test():
    torch.manual_seed(0)
    failures = []
    # RoPE-3D by hand: hd 6 (one frequency per axis, inv_freq 1); (0,0,0) is the identity
    x = torch.tensor([[[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]]], dtype=torch.float64)
    hand = []
    for a, (u0, u1) in zip((1, 2, 3), ((1, 2), (3, 4), (5, 6))):
        hand += [u0 * math.cos(a) - u1 * math.sin(a), u1 * math.cos(a) + u0 * math.sin(a)]
    if (rope3d(x, torch.tensor([[1, 2, 3]]), 10000.0).reshape(-1) - torch.tensor(hand, dtype=torch.float64)).abs().max() > 1e-12:
        failures.append("rope3d at (1, 2, 3) differs from the hand computation")
    y = torch.randn(1, 2, 3, 24, dtype=torch.float64)
    if not torch.equal(rope3d(y, torch.zeros(3, 3, dtype=torch.long), 10000.0), y):
        failures.append("rope3d at (0, 0, 0) is not the identity")

    cfg = {"dim": 48, "n_heads": 2, "layers": 2, "ffn_hidden": 96, "patch_size": 2, "latent_channels": 4,
           "text_dim": 24, "rope_theta": 10000.0}
    p32 = {n: (1.0 if n.split(".")[-2] in ("norm_q", "norm_k", "norm3") and n.endswith("weight") else 0.0)
           + 0.1 * torch.randn(s) for n, s in param_shapes(cfg).items()}
    B, C, T, h, w, Lt = 2, 4, 2, 4, 4, 5
    x0, noise, txt = torch.randn(B, C, T, h, w), torch.randn(B, C, T, h, w), torch.randn(B, Lt, 24)
    sigma = torch.tensor([0.3, 0.8])
    if not torch.equal(unpatchify(patchify(x0, 2), 2, C, T, h, w), x0):
        failures.append("unpatchify(patchify(x)) != x")

    # positions: permuting tokens with their positions permutes the output; without them it does not
    p64 = {n: t.double() for n, t in p32.items()}
    tok, tx, sg = patchify(x0.double(), 2), txt.double(), sigma.double()
    pos, perm = positions(T, 2, 2), torch.randperm(8)
    base = dit(p64, cfg, tok, tx, sg, pos)
    if (dit(p64, cfg, tok[:, perm], tx, sg, pos[perm]) - base[:, perm]).abs().max() > 1e-10:
        failures.append("permuting tokens with their positions does not permute the output")
    swapped = pos.clone()
    swapped[1], swapped[6] = pos[6], pos[1]
    if (dit(p64, cfg, tok, tx, sg, swapped) - base).abs().max() < 1e-6:
        failures.append("swapping two tokens' positions leaves the output unchanged")

    # fake case: float32 forward as the stand-in for zeroshard
    p = {n: t.clone().requires_grad_(True) for n, t in p32.items()}
    txt_g = txt.clone().requires_grad_(True)
    pred, loss = forward(p, cfg, x0, noise, sigma, txt_g)
    loss.backward()
    case = {"x0": x0, "noise": noise, "sigma": sigma, "txt": txt, "pred": pred.detach(), "loss": loss.detach(),
            "grad_input.txt": txt_g.grad}
    case.update({"param." + n: t.detach() for n, t in p.items()})
    case.update({"grad." + n: t.grad for n, t in p.items()})
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "case.safetensors")
        write_file(path, sorted(case.items()), {"config": json.dumps(cfg)})
        clean, bad = check(read_file(path), json.loads(read_header(path)[0]["__metadata__"]["config"]))
    failures += ["clean fake case: " + f for f in bad]

    def bumped(t, e):
        t = t.clone()
        t.view(-1)[5] += e
        return t
    g = "grad.blocks.1.cross_attn.k.weight"
    faults = {g: bumped(case[g], 1e-3 * case[g].abs().max()), "pred": bumped(case["pred"], 1e-2), "loss": case["loss"] * 1.001,
              "grad_input.txt": case["grad_input.txt"] * 1.01, "param.blocks.0.self_attn.norm_k.weight": None,
              "param.head.head.bias": case["param.head.head.bias"][:-1], "extra.tensor": torch.zeros(1)}
    for k, v in faults.items():  # each alone must fail, naming its tensor
        f = check({**case, k: v} if v is not None else {n: t for n, t in case.items() if n != k}, cfg)[1]
        if not any(k in line for line in f):
            failures.append(f"planted fault in {k} not reported (got {f})")
    return report("wan", f"self-test: rope3d by hand, positions matter, fake case ({clean}), {len(faults)} planted faults", failures)


if __name__ == "__main__":
    main(__doc__, self_test, check_case)
