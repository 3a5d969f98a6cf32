// How the compute runtimes' idle threads wait, set before those runtimes start.
//
// Under contention (other processes keeping every core busy) a rank with 2 intra-op threads ran
// 25x slower per step (docs/benchmarks.md, "No collapse under contention"). Every parallel
// region and every multi-threaded GEMM is a fork-join that needs all of its threads on a core at
// once. libgomp's workers spin for up to GOMP_SPINCOUNT (300,000 pause loops) after each region,
// and OpenBLAS's workers spin-yield for 2^28 cycles (~0.1 s) after each GEMM: a spinning thread
// uses up its fair share of a core, so the scheduler then runs the competing process for a whole
// time slice while the thread the others wait for is off-core. Threads that sleep as soon as
// they are idle keep their share for the work and are woken at once (a woken sleeper preempts a
// CPU hog).
//
// Both runtimes read these settings only from the environment, and only when the library is
// loaded (before main), so the executable sets them and re-executes itself once. Only how idle
// threads wait changes: thread counts and the partition of every operation stay as they were,
// so results keep their bits.
#pragma once

namespace zeroshard::cli {

// Sets OMP_WAIT_POLICY=PASSIVE and OPENBLAS_THREAD_TIMEOUT=4 (the least OpenBLAS allows) where
// the user has not set them, and re-executes /proc/self/exe with the same arguments; returns
// without doing anything when already done (ZEROSHARD_THREAD_ENV=1 in the environment) or when
// ZEROSHARD_THREAD_ENV=0 opts out. A failed re-exec warns on stderr and carries on.
void reexec_with_thread_env(char** argv);

}  // namespace zeroshard::cli
