#!/usr/bin/env python3
"""Independent PyTorch reference for the causal 3-D-convolution video VAE (Wan-VAE style),
written from the model's description, not from zeroshard's C++.

  reference_vae.py CASE.safetensors
  reference_vae.py --self-test

CASE holds param.<name> (weights), grad.<name> (zeroshard's gradient of `loss`), clip
[B,3,T,H,W], noise [B,Z,T',H',W'], zeroshard's recon, mean, logvar, the scalars loss,
recon_loss, kl, and the config as JSON in __metadata__["config"] (base_channels,
channel_mult, z_channels, num_res_blocks, temporal_down, norm_eps, kl_weight, chunk_frames).
Checks: (1) the whole-clip model (plain causal padding, float64) matches the case's outputs
and parameter names/shapes; (2) its gradients match grad.<name>; (3) a separate chunked
pass with per-conv feature caches equals the whole-clip pass. --self-test runs (3) only on
random weights. Exit 0 when everything matches, 1 otherwise (2 on bad usage).
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from reference_checks import compare, main, report  # noqa: E402
from safetensors_io import read_file, read_header  # noqa: E402

K3 = (3, 3, 3)


def levels(cfg):
    return [cfg["base_channels"] * m for m in cfg["channel_mult"]]


def factors(cfg):
    """(time factor, spatial factor) between clip and latent."""
    return 2 ** sum(bool(t) for t in cfg["temporal_down"]), 2 ** (len(cfg["channel_mult"]) - 1)


def param_shapes(cfg):
    """Every parameter name -> shape, from the config alone."""
    s = {}

    def conv(n, ci, co, k):
        s[n + ".weight"], s[n + ".bias"] = [co, ci, *k], [co]

    def res(n, ci, co):
        s[n + ".norm1.weight"], s[n + ".norm2.weight"] = [ci], [co]
        conv(n + ".conv1", ci, co, K3)
        conv(n + ".conv2", co, co, K3)
        if ci != co:
            conv(n + ".shortcut", ci, co, (1, 1, 1))

    ch, L, R, Z, td = levels(cfg), len(cfg["channel_mult"]), cfg["num_res_blocks"], cfg["z_channels"], cfg["temporal_down"]
    conv("encoder.conv_in", 3, ch[0], K3)
    cur = ch[0]
    for i in range(L):
        for j in range(R):
            res(f"encoder.down.{i}.blocks.{j}", cur, ch[i])
            cur = ch[i]
        if i < L - 1:
            conv(f"encoder.down.{i}.sample.conv", cur, cur, (1, 3, 3))
            if td[i]:
                conv(f"encoder.down.{i}.sample.time_conv", cur, cur, (3, 1, 1))
    res("encoder.mid.blocks.0", cur, cur)
    s["encoder.norm_out.weight"] = [cur]
    conv("encoder.conv_out", cur, 2 * Z, K3)
    conv("decoder.conv_in", Z, cur, K3)
    res("decoder.mid.blocks.0", cur, cur)
    for k in range(L):
        i = L - 1 - k
        for j in range(R):
            res(f"decoder.up.{k}.blocks.{j}", cur, ch[i])
            cur = ch[i]
        if i > 0:
            if td[i - 1]:
                conv(f"decoder.up.{k}.sample.time_conv", cur, 2 * cur, (3, 1, 1))
            conv(f"decoder.up.{k}.sample.conv", cur, cur, (1, 3, 3))
    s["decoder.norm_out.weight"] = [cur]
    conv("decoder.conv_out", cur, 3, K3)
    return s


# ---- convolutions: whole clip (plain causal padding) and chunked (feature cache) ----

def whole_conv(p):
    def conv(name, x, stride=(1, 1, 1)):
        w = p[name + ".weight"]
        kt, kh, kw = w.shape[2:]
        x = F.pad(x, (kw // 2, kw // 2, kh // 2, kh // 2, kt - 1, 0))  # time: left only
        return F.conv3d(x, w, p[name + ".bias"], stride=stride)
    return conv


def cached_conv(p):
    """Same convolution, fed one chunk at a time: each conv with kt > 1 keeps the last kt-1
    frames of its (unpadded) input and puts them in front of the next chunk."""
    cache = {}

    def conv(name, x, stride=(1, 1, 1)):
        w = p[name + ".weight"]
        kt, kh, kw = w.shape[2:]
        prev = cache.get(name, x[:, :, :0])
        full = torch.cat([prev, x], dim=2)
        if kt > 1:
            cache[name] = full[:, :, -(kt - 1):]  # fewer when fewer exist
        full = F.pad(full, (kw // 2, kw // 2, kh // 2, kh // 2, kt - 1 - prev.shape[2], 0))
        return F.conv3d(full, w, p[name + ".bias"], stride=stride)
    return conv


# ---- the model, written once over a conv callable ----

def channel_norm(p, name, x, eps):
    return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + eps) * p[name + ".weight"].view(1, -1, 1, 1, 1)


def res_block(p, conv, n, x, eps):
    h = conv(n + ".conv1", F.silu(channel_norm(p, n + ".norm1", x, eps)))
    h = conv(n + ".conv2", F.silu(channel_norm(p, n + ".norm2", h, eps)))
    return (conv(n + ".shortcut", x) if n + ".shortcut.weight" in p else x) + h


def encode(p, cfg, conv, clip):
    L, eps = len(cfg["channel_mult"]), cfg["norm_eps"]
    x = conv("encoder.conv_in", clip)
    for i in range(L):
        for j in range(cfg["num_res_blocks"]):
            x = res_block(p, conv, f"encoder.down.{i}.blocks.{j}", x, eps)
        if i < L - 1:
            x = conv(f"encoder.down.{i}.sample.conv", x, (1, 2, 2))
            if cfg["temporal_down"][i]:
                x = conv(f"encoder.down.{i}.sample.time_conv", x, (2, 1, 1))
    x = res_block(p, conv, "encoder.mid.blocks.0", x, eps)
    return conv("encoder.conv_out", F.silu(channel_norm(p, "encoder.norm_out", x, eps)))  # [mean; logvar]


def decode(p, cfg, conv, z):
    L, eps = len(cfg["channel_mult"]), cfg["norm_eps"]
    x = res_block(p, conv, "decoder.mid.blocks.0", conv("decoder.conv_in", z), eps)
    for k in range(L):
        i = L - 1 - k
        for j in range(cfg["num_res_blocks"]):
            x = res_block(p, conv, f"decoder.up.{k}.blocks.{j}", x, eps)
        if i > 0:
            pre = f"decoder.up.{k}.sample."
            if cfg["temporal_down"][i - 1]:
                B, c, T, H, W = x.shape
                y = conv(pre + "time_conv", x).reshape(B, 2, c, T, H, W)  # group g -> frame 2t+g
                x = y.permute(0, 2, 3, 1, 4, 5).reshape(B, c, 2 * T, H, W)
            x = x.repeat_interleave(2, dim=3).repeat_interleave(2, dim=4)  # nearest x2 in H, W
            x = conv(pre + "conv", x)
    return conv("decoder.conv_out", F.silu(channel_norm(p, "decoder.norm_out", x, eps)))


def split(h, Z):
    return h[:, :Z], h[:, Z:].clamp(-30, 20)


def forward(p, cfg, clip, noise):
    """Whole-clip training forward: mean, logvar, recon, loss, recon_loss, kl."""
    mean, logvar = split(encode(p, cfg, whole_conv(p), clip), cfg["z_channels"])
    recon = decode(p, cfg, whole_conv(p), mean + torch.exp(0.5 * logvar) * noise)
    recon_loss = (recon - clip).pow(2).mean()
    kl = (0.5 * (mean.pow(2) + logvar.exp() - 1 - logvar)).mean()
    return mean, logvar, recon, recon_loss + cfg["kl_weight"] * kl, recon_loss, kl


def chunked(p, cfg, clip, z, chunk):
    """Encode the clip `chunk` frames at a time and decode z chunk/time_factor latent frames
    at a time, each with its own feature caches; returns mean, logvar, recon."""
    enc, dec, tf = cached_conv(p), cached_conv(p), factors(cfg)[0]
    h = torch.cat([encode(p, cfg, enc, c) for c in clip.split(chunk, dim=2)], dim=2)
    recon = torch.cat([decode(p, cfg, dec, c) for c in z.split(chunk // tf, dim=2)], dim=2)
    return (*split(h, cfg["z_channels"]), recon)




def check_chunked(p, cfg, clip, noise, failures):
    """(3): chunked with caches == whole clip. Returns the worst relative difference."""
    tf = factors(cfg)[0]
    chunk = cfg["chunk_frames"] if cfg["chunk_frames"] > 0 else tf  # 0: smallest legal chunks
    if chunk % tf or clip.shape[2] % tf:
        failures.append(f"chunking: chunk_frames {chunk} and T {clip.shape[2]} must be multiples of {tf}")
        return float("inf")
    with torch.no_grad():
        mean, logvar, recon = forward(p, cfg, clip, noise)[:3]
        ours = chunked(p, cfg, clip, mean + torch.exp(0.5 * logvar) * noise, chunk)
        return max(compare(f"chunked {n} (chunk_frames {chunk}) vs whole", w, c, 1e-5, failures)
                   for n, w, c in zip(("mean", "logvar", "recon"), (mean, logvar, recon), ours))


def check_case(path):
    meta = read_header(path)[0].get("__metadata__", {})
    if "config" not in meta:
        return report("vae", f"{path} has no __metadata__ key 'config'", ["config"])
    cfg = json.loads(meta["config"])
    keys = ("base_channels", "channel_mult", "z_channels", "num_res_blocks", "temporal_down", "norm_eps", "kl_weight", "chunk_frames")
    failures = [f"config key '{k}' missing" for k in keys if k not in cfg]
    if failures:
        return report("vae", "bad config", failures)
    case, shapes = read_file(path), param_shapes(cfg)
    expected = {"clip", "noise", "recon", "mean", "logvar", "loss", "recon_loss", "kl"}
    expected |= {"param." + n for n in shapes} | {"grad." + n for n in shapes}
    failures += [f"key '{k}' missing from the case" for k in sorted(expected - case.keys())]
    failures += [f"unknown key '{k}' in the case" for k in sorted(case.keys() - expected)]
    failures += [f"{k}: shape {list(case[k].shape)}, expected {shapes[k[6:]]}" for k in sorted(case)
                 if k[:6] in ("param.", "grad.") and k[6:] in shapes and list(case[k].shape) != shapes[k[6:]]]
    tf, sf = factors(cfg)
    clip, noise = case.get("clip", torch.empty(0)).double(), case.get("noise", torch.empty(0)).double()
    if clip.dim() != 5 or clip.shape[1] != 3 or clip.shape[2] % tf or clip.shape[3] % sf or clip.shape[4] % sf:
        failures.append(f"clip: shape {list(clip.shape)}, expected [B, 3, T, H, W] with T % {tf} == 0, H, W % {sf} == 0")
    elif list(noise.shape) != [clip.shape[0], cfg["z_channels"], clip.shape[2] // tf, clip.shape[3] // sf, clip.shape[4] // sf]:
        failures.append(f"noise: shape {list(noise.shape)} does not fit clip {list(clip.shape)}")
    if failures:  # cannot run the model without every input and parameter in its place
        return report("vae", f"case does not match the config ({len(failures)} problems)", failures)
    p = {n: case["param." + n].double().requires_grad_(True) for n in shapes}

    # (1) whole-clip outputs, (2) gradients of its loss
    mean, logvar, recon, loss, recon_loss, kl = forward(p, cfg, clip, noise)
    worst_out = max(compare(n, t, case[n], 1e-4, failures, unit=True) for n, t in (("mean", mean), ("logvar", logvar), ("recon", recon)))
    for n, t in (("loss", loss), ("recon_loss", recon_loss), ("kl", kl)):
        compare(n, t, case[n].reshape(()) if case[n].numel() == 1 else case[n], 1e-5, failures, atol=1e-7)
    loss.backward()
    worst_grad, worst_name = max((compare("grad." + n, t.grad, case["grad." + n], 1e-4, failures, atol=1e-7), n) for n, t in p.items())

    # (3) chunked with feature caches == whole clip
    worst_chunk = check_chunked({n: t.detach() for n, t in p.items()}, cfg, clip, noise, failures)
    return report("vae", f"loss {loss.item():.7f} (zeroshard {case['loss'].reshape(-1)[0].item():.7f}), recon_loss {recon_loss.item():.7f}, "
                  f"kl {kl.item():.7f}; outputs worst {worst_out:.3g}; {len(p)} parameters, gradient worst relative "
                  f"{worst_grad:.3g} ({worst_name}); chunked vs whole worst {worst_chunk:.3g}", failures)


def self_test():
    """Random weights and clip: only check (3), chunked == whole clip."""
    torch.manual_seed(0)
    cfg = {"base_channels": 8, "channel_mult": [1, 2, 2], "z_channels": 4, "num_res_blocks": 1,
           "temporal_down": [False, True], "norm_eps": 1e-6, "kl_weight": 1e-3, "chunk_frames": 4}
    p = {n: (1 + 0.1 * torch.randn(s) if "norm" in n else torch.randn(s) / (s[1:].numel() ** 0.5 if len(s) > 1 else 10)).double()
         for n, s in ((n, torch.Size(s)) for n, s in param_shapes(cfg).items())}  # fan-in scaled convs
    clip, noise = torch.randn(2, 3, 8, 16, 16).double(), torch.randn(2, 4, 4, 4, 4).double()
    failures = []
    worst = max(check_chunked(p, dict(cfg, chunk_frames=c), clip, noise, failures) for c in (4, 2, 8))
    return report("vae", f"self-test, {len(p)} parameters, chunked (4, 2, 8 frames) vs whole worst relative {worst:.3g}", failures)


if __name__ == "__main__":
    main(__doc__, self_test, check_case)
