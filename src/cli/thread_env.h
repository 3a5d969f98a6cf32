// How the compute runtimes' threads wait, set before those runtimes start.
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
// The pthreads build of OpenBLAS (Debian's default, libopenblas0-pthread) goes further: the
// calling thread waits for its GEMM workers in a sched_yield loop that no setting changes, so a
// GEMM split over 2 threads lost scheduler slices to busy processes even with OMP_WAIT_POLICY=
// PASSIVE (the benchmark LM at --nproc 1 beside two busy loops: 18.8x its quiet step). The
// OpenMP build (libopenblas0-openmp, the same OpenBLAS release) runs its GEMMs on libgomp's
// team — the pool libtorch already uses — whose idle workers spin GOMP_SPINCOUNT pause loops and
// then sleep on a futex. With it, a short spin (kGompSpinCount) beat both PASSIVE (sleep at once:
// 8-14 % slower quiet steps) and the default 300,000 (17x beside two busy loops): quiet steps
// 1.2-1.5x faster than before, at most 2.6x the quiet step beside busy processes
// (docs/benchmarks.md). Both builds partition every GEMM the same way (the default job's losses
// and gradient norms keep their bits), so where the OpenMP build is installed beside the loaded
// pthreads one, the re-executed process loads it through LD_LIBRARY_PATH.
//
// All of this is read only when the libraries are loaded (before main), so a process that will
// compute sets the environment and re-executes itself once (launch_or_run.h,
// prepare_compute_process). A process that only starts local ranks and waits for them sets it
// for them without re-executing, and commands that compute little (config, inspect, plan,
// report, reference-check, tokenize) do neither: loading libtorch costs ~1 s a process here.
#pragma once

namespace zeroshard::cli {

inline constexpr const char* kGompSpinCount = "3000";

// Puts the OpenMP build of OpenBLAS first on LD_LIBRARY_PATH when the loaded OpenBLAS is the
// pthreads build and the OpenMP one is installed beside it; then, where the user has not set
// them, GOMP_SPINCOUNT=kGompSpinCount (OpenMP build; not when OMP_WAIT_POLICY is set) or
// OMP_WAIT_POLICY=PASSIVE (any other BLAS), and OPENBLAS_THREAD_TIMEOUT=4 (the least OpenBLAS
// allows); and re-executes /proc/self/exe with the same arguments. Returns without doing anything when
// already done (ZEROSHARD_THREAD_ENV=1 in the environment) or when ZEROSHARD_THREAD_ENV=0 opts
// out. A failed re-exec warns on stderr and carries on.
void reexec_with_thread_env(char** argv);

// The environment part of reexec_with_thread_env, for the processes this one starts: returns
// false, changing nothing, when ZEROSHARD_THREAD_ENV is already set.
bool set_thread_env();

}  // namespace zeroshard::cli
