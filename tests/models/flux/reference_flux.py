#!/usr/bin/env python3
"""Independent PyTorch reference for the FLUX-style MMDiT (double-stream then single-stream
blocks, 2-D RoPE, flow-matching loss), written from the model's description, not from
zeroshard's C++.

  reference_flux.py CASE.safetensors
  reference_flux.py --self-test

CASE (all F32) holds param.<name> (weights), grad.<name> (zeroshard's gradient of `loss`),
inputs x0 [B,C,h,w], noise [B,C,h,w], sigma [B], txt [B,Lt,Dt], pooled [B,Dt], zeroshard's
pred [B,C,h,w] and loss (0-dim), optionally grad_input.txt / grad_input.pooled, and the
config as JSON in __metadata__["config"] (dim, n_heads, double_blocks, single_blocks,
mlp_ratio, patch_size, latent_channels, text_dim, rope_theta). Checks, in float64: (1) the
parameter names and shapes (both ways); (2) pred and loss; (3) every gradient. --self-test
checks RoPE by hand, that positions matter, and that a fake case passes and planted faults
fail. Exit 0 when everything matches, 1 otherwise (2 on bad usage).
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

CONFIG_KEYS = ("dim", "n_heads", "double_blocks", "single_blocks", "mlp_ratio", "patch_size",
               "latent_channels", "text_dim", "rope_theta")
INPUTS = ("x0", "noise", "sigma", "txt", "pooled")
OPTIONAL = ("grad_input.txt", "grad_input.pooled")


def hidden(cfg):
    return int(round(cfg["mlp_ratio"] * cfg["dim"]))


def param_shapes(cfg):
    """Every parameter name -> shape, from the config alone."""
    D, hd, M, Dt = cfg["dim"], cfg["dim"] // cfg["n_heads"], hidden(cfg), cfg["text_dim"]
    P = cfg["latent_channels"] * cfg["patch_size"] ** 2
    s = {}

    def lin(n, i, o):
        s[n + ".weight"], s[n + ".bias"] = [o, i], [o]

    lin("img_in", P, D), lin("txt_in", Dt, D)
    lin("time_in.fc1", 256, D), lin("time_in.fc2", D, D)
    lin("vector_in.fc1", Dt, D), lin("vector_in.fc2", D, D)
    for i in range(cfg["double_blocks"]):
        for st in ("img", "txt"):
            n = f"double_blocks.{i}.{st}"
            lin(n + "_mod.lin", D, 6 * D), lin(n + "_attn.qkv", D, 3 * D), lin(n + "_attn.proj", D, D)
            s[n + "_attn.norm_q.weight"] = s[n + "_attn.norm_k.weight"] = [hd]
            lin(n + "_mlp.fc1", D, M), lin(n + "_mlp.fc2", M, D)
    for j in range(cfg["single_blocks"]):
        n = f"single_blocks.{j}."
        lin(n + "mod.lin", D, 3 * D), lin(n + "linear1", D, 3 * D + M), lin(n + "linear2", D + M, D)
        s[n + "norm_q.weight"] = s[n + "norm_k.weight"] = [hd]
    lin("final.adaLN", D, 2 * D), lin("final.linear", D, P)
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


def modulation(p, n, vec, sets):
    """(shift_1, scale_1, gate_1, shift_2, ...), each [B, 1, D]."""
    return [c[:, None] for c in linear(p, n + ".lin", F.silu(vec)).chunk(3 * sets, dim=-1)]


def modulate(x, shift, scale):
    return (1 + scale) * ln(x) + shift


def rotate_half(u):
    return torch.cat([-u[..., u.shape[-1] // 2:], u[..., :u.shape[-1] // 2]], dim=-1)


def rope(x, pos, theta):
    """x [B,H,N,hd], pos [N,2] (row, col): first hd/2 features rotate by row, last by col."""
    d = x.shape[-1] // 2
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    out = []
    for a, u in enumerate((x[..., :d], x[..., d:])):
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
    B, C, h, w = x.shape
    return x.reshape(B, C, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(B, (h // p) * (w // p), C * p * p)


def unpatchify(t, p, C, h, w):
    B = t.shape[0]
    return t.reshape(B, h // p, w // p, C, p, p).permute(0, 3, 1, 4, 2, 5).reshape(B, C, h, w)


def positions(Lt, hp, wp):
    grid = torch.stack(torch.meshgrid(torch.arange(hp), torch.arange(wp), indexing="ij"), -1).reshape(-1, 2)
    return torch.cat([torch.zeros(Lt, 2, dtype=torch.long), grid])


# ---- the model ----

def dit(p, cfg, patches, txt, sigma, pooled, pos):
    """Token-level MMDiT: image patches [B,N,C*p*p] -> predicted velocity tokens."""
    H, D, th, Lt = cfg["n_heads"], cfg["dim"], cfg["rope_theta"], txt.shape[1]
    img, txt = linear(p, "img_in", patches), linear(p, "txt_in", txt)
    vec = linear(p, "time_in.fc2", F.silu(linear(p, "time_in.fc1", timestep_embedding(sigma))))
    vec = vec + linear(p, "vector_in.fc2", F.silu(linear(p, "vector_in.fc1", pooled)))
    for i in range(cfg["double_blocks"]):
        mods, qkv, streams = {}, {}, {"txt": txt, "img": img}
        for st, x in streams.items():
            n = f"double_blocks.{i}.{st}"
            mods[st] = modulation(p, n + "_mod", vec, 2)
            q, k, v = (heads(t, H) for t in linear(p, n + "_attn.qkv", modulate(x, *mods[st][:2])).split(D, dim=-1))
            qkv[st] = (rms(q, p[n + "_attn.norm_q.weight"]), rms(k, p[n + "_attn.norm_k.weight"]), v)
        q, k, v = (torch.cat([qkv["txt"][m], qkv["img"][m]], dim=2) for m in range(3))  # text first
        a = attention(rope(q, pos, th), rope(k, pos, th), v)
        for st, a_s in (("txt", a[:, :Lt]), ("img", a[:, Lt:])):
            n, (_, _, g1, sh2, sc2, g2) = f"double_blocks.{i}.{st}", mods[st]  # shift1/scale1 used above
            x = streams[st] + g1 * linear(p, n + "_attn.proj", a_s)
            streams[st] = x + g2 * linear(p, n + "_mlp.fc2", gelu(linear(p, n + "_mlp.fc1", modulate(x, sh2, sc2))))
        txt, img = streams["txt"], streams["img"]
    x = torch.cat([txt, img], dim=1)
    for j in range(cfg["single_blocks"]):
        n = f"single_blocks.{j}."
        sh, sc, g = modulation(p, n + "mod", vec, 1)
        q, k, v, m = linear(p, n + "linear1", modulate(x, sh, sc)).split([D, D, D, hidden(cfg)], dim=-1)
        q, k, v = rms(heads(q, H), p[n + "norm_q.weight"]), rms(heads(k, H), p[n + "norm_k.weight"]), heads(v, H)
        a = attention(rope(q, pos, th), rope(k, pos, th), v)
        x = x + g * linear(p, n + "linear2", torch.cat([a, gelu(m)], dim=-1))
    shift, scale = linear(p, "final.adaLN", F.silu(vec)).chunk(2, dim=-1)
    return linear(p, "final.linear", (1 + scale[:, None]) * ln(x[:, Lt:]) + shift[:, None])


def forward(p, cfg, x0, noise, sigma, txt, pooled):
    """Flow-matching training step: pred [B,C,h,w] and loss."""
    B, C, h, w = x0.shape
    ps = cfg["patch_size"]
    s = sigma.reshape(B, 1, 1, 1)
    x_t = (1 - s) * x0 + s * noise
    pos = positions(txt.shape[1], h // ps, w // ps)
    pred = unpatchify(dit(p, cfg, patchify(x_t, ps), txt, sigma, pooled, pos), ps, C, h, w)
    return pred, (pred - (noise - x0)).pow(2).mean()


# ---- checking ----



def check(case, cfg):
    """Returns (summary, failures) for a case dict and its config."""
    failures = [f"config key '{k}' missing" for k in CONFIG_KEYS if k not in cfg]
    if failures:
        return "bad config", failures
    D, H = cfg["dim"], cfg["n_heads"]
    if D % H or (D // H) % 4 or abs(cfg["mlp_ratio"] * D - hidden(cfg)) > 1e-9:
        return "bad config", [f"config: dim {D}, n_heads {H}, mlp_ratio {cfg['mlp_ratio']} (need head_dim % 4 == 0, integer hidden)"]
    shapes = param_shapes(cfg)
    expected = set(INPUTS) | {"pred", "loss"} | {"param." + n for n in shapes} | {"grad." + n for n in shapes}
    failures += [f"key '{k}' missing from the case" for k in sorted(expected - case.keys())]
    failures += [f"unknown key '{k}' in the case" for k in sorted(case.keys() - expected - set(OPTIONAL))]
    failures += [f"{k}: shape {list(case[k].shape)}, expected {shapes[k.split('.', 1)[1]]}" for k in sorted(case)
                 if k.split(".", 1)[0] in ("param", "grad") and k.split(".", 1)[1] in shapes
                 and list(case[k].shape) != shapes[k.split(".", 1)[1]]]
    x0 = case.get("x0", torch.empty(0))
    ps, C = cfg["patch_size"], cfg["latent_channels"]
    if x0.dim() != 4 or x0.shape[1] != C or x0.shape[2] % ps or x0.shape[3] % ps:
        failures.append(f"x0: shape {list(x0.shape)}, expected [B, {C}, h, w] with h, w % {ps} == 0")
    elif "txt" in case:
        B, Lt = x0.shape[0], case["txt"].shape[1] if case["txt"].dim() == 3 else -1
        want = {"noise": list(x0.shape), "pred": list(x0.shape), "sigma": [B], "txt": [B, Lt, cfg["text_dim"]],
                "pooled": [B, cfg["text_dim"]], "grad_input.txt": [B, Lt, cfg["text_dim"]], "grad_input.pooled": [B, cfg["text_dim"]], "loss": []}
        failures += [f"{k}: shape {list(case[k].shape)}, expected {s}" for k, s in want.items() if k in case and list(case[k].shape) != s]
        if "sigma" in case and not ((case["sigma"] > 0) & (case["sigma"] < 1)).all():
            failures.append(f"sigma: values {case['sigma'].tolist()} outside (0, 1)")
    if failures:  # cannot run the model without every input and parameter in its place
        return f"case does not match the config ({len(failures)} problems)", failures
    p = {n: case["param." + n].double().requires_grad_(True) for n in shapes}
    inp = {k: case[k].double().requires_grad_(k in ("txt", "pooled")) for k in INPUTS}
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
        return report("flux", f"{path} has no __metadata__ key 'config'", ["config"])
    return report("flux", *check(read_file(path), json.loads(meta["config"])))


def self_test():
    torch.manual_seed(0)
    failures = []
    # RoPE by hand: hd 4 (one frequency per axis, inv_freq 1); (0,0) is the identity
    x = torch.tensor([[[[1.0, 2.0, 3.0, 4.0]]]], dtype=torch.float64)
    c1, s1, c2, s2 = math.cos(1), math.sin(1), math.cos(2), math.sin(2)
    hand = torch.tensor([1 * c1 - 2 * s1, 2 * c1 + 1 * s1, 3 * c2 - 4 * s2, 4 * c2 + 3 * s2], dtype=torch.float64)
    if (rope(x, torch.tensor([[1, 2]]), 10000.0).reshape(-1) - hand).abs().max() > 1e-12:
        failures.append("rope at (1, 2) differs from the hand computation")
    y = torch.randn(1, 2, 3, 8, dtype=torch.float64)
    if not torch.equal(rope(y, torch.zeros(3, 2, dtype=torch.long), 10000.0), y):
        failures.append("rope at (0, 0) is not the identity")

    cfg = {"dim": 32, "n_heads": 4, "double_blocks": 2, "single_blocks": 1, "mlp_ratio": 2, "patch_size": 2,
           "latent_channels": 4, "text_dim": 24, "rope_theta": 10000.0}
    p32 = {n: 0.1 * torch.randn(s) for n, s in param_shapes(cfg).items()}
    B, Lt = 2, 6
    x0, noise, txt, pooled = torch.randn(B, 4, 8, 8), torch.randn(B, 4, 8, 8), torch.randn(B, Lt, 24), torch.randn(B, 24)
    sigma = torch.tensor([0.3, 0.8])
    if not torch.equal(unpatchify(patchify(x0, 2), 2, 4, 8, 8), x0):
        failures.append("unpatchify(patchify(x)) != x")

    # positions: permuting image tokens with their positions permutes the output; without them it does not
    p64 = {n: t.double() for n, t in p32.items()}
    tok, tx, sg, pl = patchify(x0.double(), 2), txt.double(), sigma.double(), pooled.double()
    pos, perm = positions(Lt, 4, 4), torch.randperm(16)
    base = dit(p64, cfg, tok, tx, sg, pl, pos)
    pos_p = torch.cat([pos[:Lt], pos[Lt:][perm]])
    if (dit(p64, cfg, tok[:, perm], tx, sg, pl, pos_p) - base[:, perm]).abs().max() > 1e-10:
        failures.append("permuting image tokens with their positions does not permute the output")
    swapped = pos.clone()
    swapped[Lt + 1], swapped[Lt + 6] = pos[Lt + 6], pos[Lt + 1]
    if (dit(p64, cfg, tok, tx, sg, pl, swapped) - base).abs().max() < 1e-6:
        failures.append("swapping two image tokens' positions leaves the output unchanged")

    # fake case: float32 forward as the stand-in for zeroshard
    p = {n: t.clone().requires_grad_(True) for n, t in p32.items()}
    txt_g, pooled_g = txt.clone().requires_grad_(True), pooled.clone().requires_grad_(True)
    pred, loss = forward(p, cfg, x0, noise, sigma, txt_g, pooled_g)
    loss.backward()
    case = {"x0": x0, "noise": noise, "sigma": sigma, "txt": txt, "pooled": pooled, "pred": pred.detach(),
            "loss": loss.detach(), "grad_input.txt": txt_g.grad, "grad_input.pooled": pooled_g.grad}
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
    g = "grad.double_blocks.1.txt_mlp.fc2.weight"
    faults = {g: bumped(case[g], 1e-3 * case[g].abs().max()), "pred": bumped(case["pred"], 1e-2), "loss": case["loss"] * 1.001,
              "grad_input.pooled": case["grad_input.pooled"] * 1.01, "param.single_blocks.0.norm_k.weight": None,
              "param.final.linear.bias": case["param.final.linear.bias"][:-1], "extra.tensor": torch.zeros(1)}
    for k, v in faults.items():  # each alone must fail, naming its tensor
        f = check({**case, k: v} if v is not None else {n: t for n, t in case.items() if n != k}, cfg)[1]
        if not any(k in line for line in f):
            failures.append(f"planted fault in {k} not reported (got {f})")
    return report("flux", f"self-test: rope by hand, positions matter, fake case ({clean}), {len(faults)} planted faults", failures)


if __name__ == "__main__":
    main(__doc__, self_test, check_case)
