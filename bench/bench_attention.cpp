// One attention forward + backward at growing sequence lengths: time and the peak of tensor
// bytes counted at the allocator (util/tensor_memory.h) above the inputs, for the blockwise
// kernel and the plain formulation (where its estimated footprint fits). Not a test; see
// docs/benchmarks.md for the commands and results.
//
//   build/bench/zs_bench_attention [--tokens 1024,4096,16384,32768] [--heads 12] [--kv-heads N] [--head-dim 128]
//       [--kernel both|blockwise|plain] [--dtype fp32|bf16] [--bf16-matmul auto|native|via_fp32]
//       [--causal] [--block-q N] [--block-k N] [--repeat N] [--threads N] [--plain-max-gib G]
#include "nn/attention.h"
#include "nn/matmul.h"
#include "util/tensor_memory.h"
#include "util/threads.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace zeroshard;

namespace {

struct Args {
  std::vector<int64_t> tokens = {1024, 4096, 16384, 32768};
  int64_t heads = 12, kv_heads = 0, head_dim = 128, block_q = 0, block_k = 0, repeat = 1;
  int threads = 0;
  std::string kernel = "both", dtype = "fp32", bf16_matmul = "auto";
  bool causal = false;
  double plain_max_gib = 8.0;
};

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(key + " needs a value");
      return argv[++i];
    };
    if (key == "--tokens") a.tokens = parse_list(value());
    else if (key == "--heads") a.heads = std::stoll(value());
    else if (key == "--kv-heads") a.kv_heads = std::stoll(value());
    else if (key == "--head-dim") a.head_dim = std::stoll(value());
    else if (key == "--kernel") a.kernel = value();
    else if (key == "--dtype") a.dtype = value();
    else if (key == "--bf16-matmul") a.bf16_matmul = value();
    else if (key == "--causal") a.causal = true;
    else if (key == "--block-q") a.block_q = std::stoll(value());
    else if (key == "--block-k") a.block_k = std::stoll(value());
    else if (key == "--repeat") a.repeat = std::stoll(value());
    else if (key == "--threads") a.threads = std::stoi(value());
    else if (key == "--plain-max-gib") a.plain_max_gib = std::stod(value());
    else throw std::invalid_argument("unknown argument " + key + " (see the comment at the top of bench_attention.cpp)");
  }
  if (a.kernel != "both" && a.kernel != "blockwise" && a.kernel != "plain")
    throw std::invalid_argument("--kernel: expected both, blockwise or plain, got " + a.kernel);
  if (a.kv_heads == 0) a.kv_heads = a.heads;
  if (a.kv_heads < 1 || a.heads % a.kv_heads != 0)
    throw std::invalid_argument("--kv-heads: expected a divisor of --heads (" + std::to_string(a.heads) + ")");
  if (a.dtype != "fp32" && a.dtype != "bf16") throw std::invalid_argument("--dtype: expected fp32 or bf16, got " + a.dtype);
  return a;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Measure {
  double forward_s = 0, backward_s = 0;
  int64_t peak_bytes = 0;
};

Measure measure(const Args& a, int64_t n, nn::AttentionKernel kernel) {
  const auto dtype = a.dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  torch::manual_seed(0);
  at::Tensor q = at::randn({1, a.heads, n, a.head_dim}).to(dtype).requires_grad_(true);
  at::Tensor k = at::randn({1, a.kv_heads, n, a.head_dim}).to(dtype).requires_grad_(true);
  at::Tensor v = at::randn({1, a.kv_heads, n, a.head_dim}).to(dtype).requires_grad_(true);
  const at::Tensor g = at::randn({1, a.heads, n, a.head_dim}).to(dtype);
  nn::AttentionOptions o;
  o.causal = a.causal;
  o.kernel = kernel;
  o.block_q = a.block_q;
  o.block_k = a.block_k;
  std::vector<Measure> runs;
  for (int64_t r = 0; r < a.repeat; ++r) {
    q.mutable_grad() = at::Tensor();
    k.mutable_grad() = at::Tensor();
    v.mutable_grad() = at::Tensor();
    Measure m;
    const int64_t before = util::live_tensor_bytes();
    util::reset_peak_tensor_bytes();
    auto t0 = std::chrono::steady_clock::now();
    at::Tensor out = nn::attention(q, k, v, o);
    m.forward_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    out.backward(g);
    m.backward_s = seconds_since(t0);
    m.peak_bytes = util::peak_tensor_bytes() - before;
    runs.push_back(m);
  }
  // The median run by total time.
  std::sort(runs.begin(), runs.end(), [](const Measure& x, const Measure& y) {
    return x.forward_s + x.backward_s < y.forward_s + y.backward_s;
  });
  return runs[runs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (a.threads > 0) util::set_compute_threads(a.threads);
    nn::set_bf16_matmul(nn::parse_bf16_matmul(a.bf16_matmul));
    util::track_tensor_memory();
    std::printf("heads %lld (kv %lld), head_dim %lld, %s%s, threads %d, bf16 products %s, tiles %lld x %lld, median of %lld\n",
                static_cast<long long>(a.heads), static_cast<long long>(a.kv_heads), static_cast<long long>(a.head_dim),
                a.dtype.c_str(),
                a.causal ? ", causal" : "", at::get_num_threads(),
                nn::bf16_matmul_name(nn::resolved_bf16_matmul()).c_str(),
                static_cast<long long>(a.block_q > 0 ? a.block_q : nn::kAttentionBlockQ),
                static_cast<long long>(a.block_k > 0 ? a.block_k : nn::kAttentionBlockK), static_cast<long long>(a.repeat));
    std::printf("| tokens | kernel | peak above inputs (MiB) | forward (s) | backward (s) | forward + backward (s) |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (int64_t n : a.tokens) {
      for (const std::string name : {"blockwise", "plain"}) {
        if (a.kernel != "both" && a.kernel != name) continue;
        const bool plain = name == std::string("plain");
        // The plain formulation holds about four [heads, n, n] float32 tensors at its peak
        // (scores, probabilities, their gradients).
        const double plain_gib = 4.0 * static_cast<double>(a.heads) * static_cast<double>(n) * static_cast<double>(n) * 4.0 /
                                 (1024.0 * 1024.0 * 1024.0);
        if (plain && plain_gib > a.plain_max_gib) {
          std::printf("| %lld | plain | does not fit (~%.0f GiB estimated) | - | - | - |\n", static_cast<long long>(n),
                      plain_gib);
          std::fflush(stdout);
          continue;
        }
        const Measure m = measure(a, n, plain ? nn::AttentionKernel::Plain : nn::AttentionKernel::Blockwise);
        std::printf("| %lld | %s | %.1f | %.3f | %.3f | %.3f |\n", static_cast<long long>(n), name.c_str(),
                    static_cast<double>(m.peak_bytes) / (1024.0 * 1024.0), m.forward_s, m.backward_s,
                    m.forward_s + m.backward_s);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zs_bench_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
