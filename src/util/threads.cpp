#include "util/threads.h"

#include <ATen/Parallel.h>

#include <dlfcn.h>

namespace zeroshard::util {

void set_compute_threads(int threads) {
  at::set_num_threads(threads);
  // Looked up at run time: libtorch may be linked against another BLAS, which has no such call.
  using SetThreads = void (*)(int);
  if (auto* set_blas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set_blas(threads);
}

}  // namespace zeroshard::util
