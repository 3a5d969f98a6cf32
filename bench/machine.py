"""The machine a benchmark ran on, for its printed header: the CPU's model and kind (the bf16 GEMM
path the engine gets: AMX tiles, AVX-512 bf16 dot products, or neither), CPUs, kernel.

The kind matters more than the model name: the same "Intel Xeon Processor" string covers machines
whose bf16 GEMM differs 3-4x (docs/benchmarks.md), and a 6.x kernel's scheduler changes the
contention rows (bench/contention.py).
"""
import os
import platform


def cpu_flags():
    """The CPU's feature words from /proc/cpuinfo (x86 "flags", Arm "Features")."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags") or line.startswith("Features"):
                return set(line.split(":", 1)[1].split())
    return set()


def cpu_has_bf16_dot_product():
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


def cpu_kind():
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return "AMX"
    if "avx512_bf16" in flags:
        return "avx512_bf16"
    if "avx2" in flags:
        return "AVX2 only"
    return "no AVX2"


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def describe():
    """e.g. "Intel(R) Xeon(R) Processor (AMX), 2 CPUs, Linux 6.18.44"."""
    return f"{cpu_model()} ({cpu_kind()}), {os.cpu_count()} CPUs, Linux {platform.release()}"
