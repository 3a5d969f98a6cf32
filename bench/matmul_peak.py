#!/usr/bin/env python3
"""Matmul throughput of this machine, fp32 vs bf16 (Debian python3-torch: the same oneDNN as libtorch).

  /usr/bin/python3 bench/matmul_peak.py
"""
import time, torch
for threads in (1, 2):
    torch.set_num_threads(threads)
    for dt in (torch.float32, torch.bfloat16):
        n = 2048
        a = torch.randn(n, n).to(dt); b = torch.randn(n, n).to(dt)
        for _ in range(2): a @ b
        best = 1e9
        for _ in range(5):
            t = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t)
        print(f"threads={threads} {str(dt):15s} {2*n**3/best/1e9:8.1f} GFLOP/s")
