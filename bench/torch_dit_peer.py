#!/usr/bin/python3
"""PyTorch peer for the DiT benchmark: trains the flux MMDiT of a zeroshard run directory with
DDP (or DDP + ZeroRedundancyOptimizer) on CPU/gloo, in fp32 or under bf16 autocast, and
appends per-step and summary JSON lines to --out — the DiT part of bench/speed_suite.py.

  /usr/bin/python3 bench/torch_dit_peer.py --mode ddp|zero --run-dir RUN --nproc 2 \\
      --out results.jsonl [--steps N] [--warmup K] [--bf16]

The model is tests/models/flux/reference_flux.py (an independent implementation of the DiT, from
its description), with the DiT's initial weights from RUN/init.safetensors ("dit.*"). Its
inputs are seeded random tensors of the shapes zeroshard's frozen towers hand the DiT (latents
[B, z, h, w], text states [B, text_len, text_dim], pooled text [B, text_dim]): the peer times
the DiT's training step only, so its losses are not comparable with zeroshard's, and
zeroshard's step also contains the towers (reported as towers_s). Same optimizer, schedule,
clipping, micro-batch and accumulation as the run's config.json.
"""
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models", "flux"))
import torch_peer  # noqa: E402  (read_safetensors, launch, lr_at, warmup_steps, InputError)

FLUX_KEYS = ("dim", "n_heads", "double_blocks", "single_blocks", "mlp_ratio", "patch_size", "rope_theta",
             "text_dim", "text_len")


def load(run_dir):
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise torch_peer.InputError(f"{path}: file not found")
    cfg = json.load(open(path))
    if cfg.get("model", {}).get("series") != "flux":
        raise torch_peer.InputError(f"{path}: model.series is {cfg.get('model', {}).get('series')!r}, not 'flux'")
    for k in FLUX_KEYS:
        if k not in cfg.get("flux", {}):
            raise torch_peer.InputError(f"{path}: missing key 'flux.{k}'")
    f, v = cfg["flux"], cfg["vae"]
    levels = len([c for c in str(v["channel_mult"]).replace("[", "").replace("]", "").split(",") if c.strip()])
    latent = cfg["data"]["image_size"] // (2 ** (levels - 1))
    dit_cfg = {k: f[k] for k in FLUX_KEYS if k not in ("text_len",)}
    dit_cfg["latent_channels"] = v["z_channels"]
    shapes = {"latent": (v["z_channels"], latent, latent), "text": (f["text_len"], f["text_dim"])}
    return cfg, dit_cfg, shapes


def validate(args):
    load(args.run_dir)
    weights = os.path.join(args.run_dir, "init.safetensors")
    names = [n for n in torch_peer.read_safetensors(weights, want_data=False) if n.startswith("dit.")]
    if not names:
        raise torch_peer.InputError(f"{weights}: no 'dit.*' tensors")


def run_rank(args):
    import torch
    import torch.distributed as dist
    import reference_flux

    rank, world = torch_peer.start_rank()
    cfg, dit_cfg, shapes = load(args.run_dir)
    t = cfg["train"]
    steps = args.steps or t["steps"]
    tensors = torch_peer.read_safetensors(os.path.join(args.run_dir, "init.safetensors"))
    names = sorted(n[len("dit."):] for n in tensors if n.startswith("dit."))
    expected = reference_flux.param_shapes(dit_cfg)
    if sorted(expected) != names:
        raise torch_peer.InputError(f"init.safetensors: DiT parameters differ from reference_flux's layout "
                                    f"(missing {sorted(set(expected) - set(names))}, extra {sorted(set(names) - set(expected))})")

    class DiT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.names = names
            self.params = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.from_numpy(tensors["dit." + n][1].copy())) for n in names])

        def forward(self, x0, noise, sigma, txt, pooled):
            p = dict(zip(self.names, self.params))
            return reference_flux.forward(p, dit_cfg, x0, noise, sigma, txt, pooled)[1]

    B, ga = t["micro_batch_size"], t["grad_accum"]
    gen = torch.Generator().manual_seed(1000 + rank)

    def inputs():
        z = torch.randn((B,) + shapes["latent"], generator=gen)
        return (z, torch.randn(z.shape, generator=gen), torch.sigmoid(torch.randn(B, generator=gen)),
                torch.randn((B,) + shapes["text"], generator=gen), torch.randn(B, shapes["text"][1], generator=gen))

    batches = [[inputs() for _ in range(ga)] for _ in range(steps)]  # made before timing starts
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300))
    model = DiT()
    records = torch_peer.train_steps(args, model, t, steps, f"torch_dit_{args.mode}",
                                     lambda ddp, s, mi: ddp(*batches[s - 1][mi]))

    summary = torch_peer.summarize(args, records, f"torch_dit_{args.mode}", steps, "images", world * ga * B,
                                   num_params=sum(p.numel() for p in model.parameters()))
    if rank == 0:
        torch_peer.append_results(args.out, records, summary)
        print(f"[{summary['peer']}/{summary['precision']}] median step {summary['median_step_time_s'] * 1e3:.1f} ms, "
              f"{summary['images_per_s']:.2f} images/s",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    return torch_peer.peer_main(__doc__, run_rank, validate, __file__, "torch_dit_peer")


if __name__ == "__main__":
    sys.exit(main())
