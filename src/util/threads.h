// Compute threads per rank: libtorch's intra-op pool and OpenBLAS's own pool. libtorch's
// set_num_threads leaves OpenBLAS (Debian's libopenblas0-pthread) at one thread per core, so
// with several ranks per host every GEMM's helper threads spin-yield against the other ranks
// (measured: ZeRO-3 steps of the benchmark LM 15 % slower, docs/benchmarks.md).
#pragma once

#include <string>

namespace zeroshard::util {

void set_compute_threads(int threads);

// Compute threads per rank when the config does not say: the cores this process may run on
// (sched_getaffinity: a Slurm or taskset CPU mask counts, the host's core count does not) shared
// evenly by the ranks on the host, at least 1.
int default_compute_threads(int local_world_size);

// The BLAS the process loaded, for the run's log: "OpenBLAS 0.3.21 ... (OpenMP)" / "(pthreads)" /
// "(sequential)", or "not OpenBLAS" (src/cli/thread_env.h says why the build matters).
std::string blas_description();

}  // namespace zeroshard::util
