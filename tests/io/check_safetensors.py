#!/usr/bin/env python3
"""An independent reader of zeroshard's files, written from the formats' documentation only
(no zeroshard code, no safetensors package): python3-torch, struct, json and zlib.

  verify EXPORT CKPT_DIR [--dtype fp32|bf16]   the export equals the checkpoint's shards,
                                               reassembled from manifest.json; CRCs checked
  write OUT LIKE                               a file from "another tool": LIKE's names and
                                               shapes, seeded values, BF16, reversed order
  lie IN OUT NAME (size|overlap)               IN with NAME's data_offsets made inconsistent
"""
import json
import os
import struct
import sys
import zlib

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from safetensors_io import read_file, read_header, write_file  # noqa: E402

def verify(export, ckpt, dtype):
    manifest = json.load(open(f"{ckpt}/manifest.json"))
    contents = {}
    for f in manifest["files"]:
        data = open(f"{ckpt}/{f['name']}", "rb").read()
        assert len(data) == f["bytes"], f"{f['name']}: {len(data)} bytes, manifest {f['bytes']}"
        assert zlib.crc32(data) == f["crc32"], f"{f['name']}: CRC-32 mismatch"
        contents[f["name"]] = data
    exported = read_file(export)
    assert len(exported) == len(manifest["tensors"]), f"{len(exported)} tensors exported, {len(manifest['tensors'])} in the manifest"
    for t in manifest["tensors"]:
        numel = 1
        for d in t["shape"]:
            numel *= d
        parts = []
        # Frozen tensors of a bf16 param_dtype run are saved in bf16 (manifest dtype "BF16").
        saved, size = (torch.bfloat16, 2) if t.get("dtype", "F32") == "BF16" else (torch.float32, 4)
        for p in t["pieces"]:
            off = p["offsets"]["param"]
            parts.append(torch.frombuffer(bytearray(contents[p["file"]][off:off + size * (p["end"] - p["begin"])]), dtype=saved))
        full = torch.cat(parts).reshape(t["shape"]).to(torch.float32)
        assert full.numel() == numel
        want = full if dtype == "fp32" else full.to(torch.bfloat16)
        got = exported[t["name"]]
        assert got.dtype == want.dtype, f"{t['name']}: dtype {got.dtype}, expected {want.dtype}"
        assert torch.equal(got, want), f"{t['name']}: exported values differ from the checkpoint's shards"
    print(f"OK {len(exported)} tensors, {len(manifest['files'])} shard files")


def write_like(out, like):
    g = torch.Generator().manual_seed(5)
    tensors = [(n, (torch.randn(t.shape, generator=g) * 0.05).to(torch.bfloat16)) for n, t in read_file(like).items()]
    write_file(out, list(reversed(tensors)), {"format": "pt", "producer": "check_safetensors.py"})
    print(f"wrote {len(tensors)} tensors")


def lie(src, out, name, how):
    header, start = read_header(src)
    data = open(src, "rb").read()[start:]
    b, e = header[name]["data_offsets"]
    header[name]["data_offsets"] = [b, e + 4] if how == "size" else [b + 4, e + 4]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "verify":
        verify(sys.argv[2], sys.argv[3], sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--dtype" else "fp32")
    elif cmd == "write":
        write_like(sys.argv[2], sys.argv[3])
    elif cmd == "lie":
        lie(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        sys.exit(__doc__)
