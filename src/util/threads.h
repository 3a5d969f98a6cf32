// Compute threads per rank: libtorch's intra-op pool and OpenBLAS's own pool. libtorch's
// set_num_threads leaves OpenBLAS (Debian's libopenblas0-pthread) at one thread per core, so
// with several ranks per host every GEMM's helper threads spin-yield against the other ranks
// (measured: ZeRO-3 steps of the benchmark LM 15 % slower, docs/benchmarks.md).
#pragma once

namespace zeroshard::util {

void set_compute_threads(int threads);

}  // namespace zeroshard::util
