// Micro-benchmark: one activation forward + backward at the real models' shapes, nn::swiglu and
// nn::gelu_tanh against the libtorch composition they replaced, side by side in one run, one
// thread: SwiGLU at Qwen3-0.6B's [1024 tokens, 3072], tanh-GELU at Wan 1.3B's [1024 tokens, 8960].
// Reports the time and the tensor bytes the forward keeps for backward (counted at the allocator).
//   build/bench/zs_bench_activations --benchmark_min_time=1
#include "nn/activations.h"
#include "util/tensor_memory.h"

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>

namespace {

void BM_Activation(benchmark::State& state) {
  torch::set_num_threads(1);
  zeroshard::util::track_tensor_memory();
  namespace nn = zeroshard::nn;
  const bool ours = state.range(0) == 1, gelu = state.range(1) == 1;
  const auto dtype = state.range(2) == 16 ? torch::kBFloat16 : torch::kFloat;
  const int64_t tokens = 1024, width = gelu ? 8960 : 3072;
  torch::manual_seed(0);
  auto a = (2 * torch::randn({1, tokens, width})).to(dtype).requires_grad_(true);
  auto b = torch::randn({1, tokens, width}).to(dtype).requires_grad_(true);
  const auto dy = torch::randn({1, tokens, width}).to(dtype);
  int64_t kept = 0;
  for (auto _ : state) {
    a.mutable_grad().reset();
    b.mutable_grad().reset();
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t live = zeroshard::util::live_tensor_bytes();
    const auto y = gelu ? (ours ? nn::gelu_tanh(a) : nn::gelu_tanh_composed(a))
                        : (ours ? nn::swiglu(a, b) : nn::swiglu_composed(a, b));
    kept = zeroshard::util::live_tensor_bytes() - live - static_cast<int64_t>(y.nbytes());
    y.backward(dy);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["kept_KiB"] = static_cast<double>(kept) / 1024;
  state.SetLabel(std::string(gelu ? (ours ? "nn::gelu_tanh" : "at::gelu tanh") : (ours ? "nn::swiglu" : "silu * up")) +
                 (dtype == torch::kBFloat16 ? " bf16" : " fp32"));
}

}  // namespace

// {1: ours, 0: composition} x {0: SwiGLU, 1: tanh-GELU} x {16: bf16, 32: fp32}.
BENCHMARK(BM_Activation)->ArgsProduct({{1, 0}, {0, 1}, {16, 32}})->UseManualTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
