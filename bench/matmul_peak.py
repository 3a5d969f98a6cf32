#!/usr/bin/python3
"""Matmul throughput of this machine (Debian python3-torch: the same libtorch, oneDNN and
OpenBLAS that zeroshard links), for the three kernels a bf16 or fp32 run can use:

  fp32           fp32 operands, fp32 GEMM
  bf16_native    bf16 operands through libtorch's bf16 kernel (oneDNN where the CPU has
                 bf16 dot-product instructions; a scalar fallback where it has not)
  bf16_via_fp32  bf16 operands widened to fp32, fp32 GEMM, result rounded to bf16: what
                 zeroshard's mixed_precision.bf16_matmul=via_fp32 does (src/nn/matmul.h)

  /usr/bin/python3 bench/matmul_peak.py [--threads 1,2] [--processes N] [--json OUT]

--processes N runs N single-threaded processes at the same time (as N ranks of one thread
each do) and reports their summed throughput: the peak a W-rank job can reach on this
machine, contention for cores, caches and memory included.

Shapes: a square 2048^3 and the benchmark LM's GEMMs (512 tokens x 768 -> 2048 and back).
Best of 5 timed runs each; the peak of a kernel is its best shape. bf16_native on a CPU
without bf16 instructions is measured on the smaller shapes only (it runs at a few GFLOP/s).
"""
import argparse
import json
import time

import torch

from machine import cpu_has_bf16_dot_product

SHAPES = [(2048, 2048, 2048), (512, 768, 2048), (512, 2048, 768)]  # (M, K, N)


def gflops(fn, m, k, n, repeats=5):
    fn()
    best = 1e9
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * m * k * n / best / 1e9


def measure(threads):
    torch.set_num_threads(threads)
    native_fast = cpu_has_bf16_dot_product()
    out = {}
    for m, k, n in SHAPES:
        a32, b32 = torch.randn(m, k), torch.randn(k, n)
        a16, b16 = a32.bfloat16(), b32.bfloat16()
        row = {"fp32": gflops(lambda: a32 @ b32, m, k, n),
               "bf16_via_fp32": gflops(lambda: (a16.float() @ b16.float()).bfloat16(), m, k, n)}
        if native_fast or m * k * n <= 512 * 768 * 2048:
            row["bf16_native"] = gflops(lambda: a16 @ b16, m, k, n, repeats=2 if not native_fast else 5)
        out[f"{m}x{k}x{n}"] = row
    peaks = {kind: max(r[kind] for r in out.values() if kind in r) for kind in ("fp32", "bf16_native", "bf16_via_fp32")}
    return {"threads": threads, "shapes": out, "peak_gflops": peaks, "cpu_has_bf16_dot_product": native_fast}


def _concurrent_worker(barrier, queue):
    torch.set_num_threads(1)
    native_fast = cpu_has_bf16_dot_product()
    out = {}
    for m, k, n in SHAPES:
        a32, b32 = torch.randn(m, k), torch.randn(k, n)
        a16, b16 = a32.bfloat16(), b32.bfloat16()
        kernels = {"fp32": lambda: a32 @ b32, "bf16_via_fp32": lambda: (a16.float() @ b16.float()).bfloat16()}
        if native_fast or m * k * n <= 512 * 768 * 2048:
            kernels["bf16_native"] = lambda: a16 @ b16
        for kind, fn in kernels.items():
            barrier.wait()  # every process times the same kernel at the same time
            out.setdefault(kind, {})[f"{m}x{k}x{n}"] = gflops(fn, m, k, n, repeats=5 if kind != "bf16_native" or native_fast else 2)
    queue.put(out)


def measure_concurrent(processes):
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=_concurrent_worker, args=(barrier, queue)) for _ in range(processes)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    total = {}
    for kind in results[0]:
        per_shape = {shape: sum(r[kind][shape] for r in results) for shape in results[0][kind]}
        total[kind] = max(per_shape.values())
    return {"processes": processes, "threads_each": 1, "peak_gflops_total": total,
            "cpu_has_bf16_dot_product": cpu_has_bf16_dot_product()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--processes", type=int, default=0, help="also measure N concurrent 1-thread processes")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    results = [measure(int(t)) for t in args.threads.split(",") if t]
    for r in results:
        for shape, row in r["shapes"].items():
            cells = "  ".join(f"{k} {v:7.1f}" for k, v in row.items())
            print(f"threads={r['threads']} {shape:16s} {cells}  GFLOP/s")
        print(f"threads={r['threads']} peak: " + ", ".join(f"{k} {v:.1f}" for k, v in r["peak_gflops"].items()) +
              f" GFLOP/s (bf16 dot-product instructions: {'yes' if r['cpu_has_bf16_dot_product'] else 'no'})")
    if args.processes:
        c = measure_concurrent(args.processes)
        results.append(c)
        print(f"{args.processes} processes x 1 thread, summed peak: " +
              ", ".join(f"{k} {v:.1f}" for k, v in c["peak_gflops_total"].items()) + " GFLOP/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
