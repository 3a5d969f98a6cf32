// Micro-benchmark: one RMSNorm forward + backward at Qwen3-0.6B's shapes (1,024 tokens: the
// layer norms over 1,024 channels, the QK norms over 16 and 8 heads of 128), nn::rms_norm against
// the libtorch composition it replaced, side by side in one run, one thread. Reports the time and
// the tensor bytes the forward keeps for backward (counted at the allocator).
//   build/bench/zs_bench_rms_norm --benchmark_min_time=1
#include "nn/rms_norm.h"
#include "util/tensor_memory.h"

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>

namespace {

void BM_RmsNorm(benchmark::State& state) {
  torch::set_num_threads(1);
  zeroshard::util::track_tensor_memory();
  const bool ours = state.range(0) == 1;
  const int64_t heads = state.range(1), dim = state.range(2), tokens = 1024;
  const auto dtype = state.range(3) == 16 ? torch::kBFloat16 : torch::kFloat;
  torch::manual_seed(0);
  const std::vector<int64_t> shape = heads == 0 ? std::vector<int64_t>{1, tokens, dim}
                                                : std::vector<int64_t>{1, tokens, heads, dim};
  auto x = torch::randn(shape).to(dtype).requires_grad_(true);
  auto w = (1 + 0.1 * torch::randn({dim})).to(dtype).requires_grad_(true);
  const auto dy = torch::randn(shape).to(dtype);
  int64_t kept = 0;
  for (auto _ : state) {
    x.mutable_grad().reset();
    w.mutable_grad().reset();
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t live = zeroshard::util::live_tensor_bytes();
    const auto y = ours ? zeroshard::nn::rms_norm(x, w, 1e-6) : zeroshard::nn::rms_norm_composed(x, w, 1e-6);
    kept = zeroshard::util::live_tensor_bytes() - live - static_cast<int64_t>(y.nbytes());
    y.backward(dy);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["kept_KiB"] = static_cast<double>(kept) / 1024;
  state.SetLabel(std::string(ours ? "nn::rms_norm" : "composition") + (dtype == torch::kBFloat16 ? " bf16" : " fp32"));
}

}  // namespace

// {1: nn::rms_norm, 0: composition} x {0: [1, 1024, 1024], 16 / 8: [1, 1024, heads, 128]} x {16: bf16, 32: fp32}.
BENCHMARK(BM_RmsNorm)
    ->ArgsProduct({{1, 0}, {0}, {1024}, {16, 32}})
    ->ArgsProduct({{1, 0}, {16, 8}, {128}, {16}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
