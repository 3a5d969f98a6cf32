#include "cli/thread_env.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace zeroshard::cli {

namespace {

// OpenBLAS's threading: 0 sequential, 1 pthreads, 2 OpenMP, -1 not OpenBLAS.
int openblas_parallel() {
  using GetParallel = int (*)();
  auto* get_parallel = reinterpret_cast<GetParallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  return get_parallel == nullptr ? -1 : get_parallel();
}

// The folder of the OpenMP build of OpenBLAS when the loaded OpenBLAS is the pthreads build and
// the OpenMP build sits beside it (Debian: <libdir>/openblas-pthread/ and <libdir>/openblas-openmp/);
// empty otherwise.
std::string openmp_openblas_dir() {
  if (openblas_parallel() != 1) return {};
  Dl_info info{};
  void* symbol = dlsym(RTLD_DEFAULT, "openblas_get_parallel");
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  const std::filesystem::path loaded = std::filesystem::canonical(info.dli_fname, ec);  // through the alternatives links
  if (ec || loaded.parent_path().filename() != "openblas-pthread") return {};
  const std::filesystem::path openmp = loaded.parent_path().parent_path() / "openblas-openmp";
  return std::filesystem::exists(openmp / "libopenblas.so.0", ec) ? openmp.string() : std::string();
}

}  // namespace

bool set_thread_env() {
  const char* marker = std::getenv("ZEROSHARD_THREAD_ENV");
  if (marker != nullptr) return false;  // "1": set by the previous exec or launcher (ranks inherit it); "0": opted out
  // Every setenv with overwrite = 0: a value the user chose wins.
  const std::string openmp = openmp_openblas_dir();
  if (!openmp.empty()) {
    const char* old = std::getenv("LD_LIBRARY_PATH");
    setenv("LD_LIBRARY_PATH", (old != nullptr && *old != '\0' ? openmp + ":" + old : openmp).c_str(), 1);
  }
  if (!openmp.empty() || openblas_parallel() == 2) {
    // One libgomp team for GEMMs and libtorch's loops: a short spin, then a futex sleep.
    if (std::getenv("OMP_WAIT_POLICY") == nullptr) setenv("GOMP_SPINCOUNT", kGompSpinCount, 0);
  } else {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  }
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  setenv("ZEROSHARD_THREAD_ENV", "1", 1);
  return true;
}

void reexec_with_thread_env(char** argv) {
  if (!set_thread_env()) return;
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "zeroshard: warning: re-executing /proc/self/exe to set the compute threads' environment failed (%s); idle "
               "compute threads will spin (slow when other processes keep the cores busy)\n", std::strerror(errno));
}

}  // namespace zeroshard::cli
