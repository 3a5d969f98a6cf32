// Micro-benchmark: backward through a head tied to its embedding (Qwen3-0.6B's 151,936 x 1,024
// table, 512 tokens, sparse embedding rows), zeroshard's nn::linear against torch::linear, side
// by side in one run, one thread. Reports the backward's time and the tensor bytes it allocated
// beyond what was live (counted at the allocator): torch::linear's weight gradient is a view, so
// autograd sums the embedding's rows into a second [vocab, hidden] tensor.
//   build/bench/zs_bench_tied_head --benchmark_min_time=1
#include "nn/matmul.h"
#include "util/tensor_memory.h"

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>

namespace {

constexpr int64_t kVocab = 151936, kHidden = 1024, kTokens = 512;

void BM_TiedHeadBackward(benchmark::State& state) {
  torch::set_num_threads(1);
  zeroshard::util::track_tensor_memory();
  const bool ours = state.range(0) == 1;
  const auto dtype = state.range(1) == 16 ? torch::kBFloat16 : torch::kFloat;
  // libtorch's bf16 product on both sides (via_fp32 would time nn::linear's other kernel). On a
  // CPU without bf16 dot-product instructions that product is a slow scalar loop, for both.
  zeroshard::nn::set_bf16_matmul(zeroshard::nn::Bf16Matmul::Native);
  torch::manual_seed(0);
  auto w = (torch::randn({kVocab, kHidden}) * 0.02).to(dtype).requires_grad_(true);
  const auto ids = torch::randint(kVocab, {1, kTokens});
  const auto upstream = torch::randn({1, kTokens, kVocab}).to(dtype);
  int64_t extra = 0;
  for (auto _ : state) {
    w.mutable_grad().reset();
    const auto h = torch::embedding(w, ids, -1, false, /*sparse=*/true);
    const auto y = ours ? zeroshard::nn::linear(h, w) : torch::linear(h, w);
    const int64_t live = zeroshard::util::live_tensor_bytes();
    zeroshard::util::reset_peak_tensor_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    y.backward(upstream);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    extra = zeroshard::util::peak_tensor_bytes() - live;
  }
  state.counters["backward_peak_MiB"] = static_cast<double>(extra) / (1 << 20);
  state.SetLabel(std::string(ours ? "nn::linear" : "torch::linear") + (dtype == torch::kBFloat16 ? " bf16" : " fp32"));
}

}  // namespace

// {1: nn::linear, 0: torch::linear} x {16: bf16, 32: fp32}, alternating.
BENCHMARK(BM_TiedHeadBackward)
    ->ArgNames({"ours", "bits"})
    ->Args({0, 16})->Args({1, 16})->Args({0, 32})->Args({1, 32})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
