#include "util/threads.h"

#include <ATen/Parallel.h>

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace zeroshard::util {

void set_compute_threads(int threads) {
  at::set_num_threads(threads);
  // Looked up at run time: libtorch may be linked against another BLAS, which has no such call.
  using SetThreads = void (*)(int);
  if (auto* set_blas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set_blas(threads);
}

int default_compute_threads(int local_world_size) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const int cores = sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask)
                                                                  : static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local_world_size));
}

std::string blas_description() {
  using GetConfig = const char* (*)();
  using GetParallel = int (*)();
  auto* config = reinterpret_cast<GetConfig>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  auto* parallel = reinterpret_cast<GetParallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  if (config == nullptr || parallel == nullptr) return "not OpenBLAS";
  const int p = parallel();
  return std::string(config()) + (p == 0 ? " (sequential)" : p == 1 ? " (pthreads)" : " (OpenMP)");
}

}  // namespace zeroshard::util
