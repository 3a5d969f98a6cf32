// Micro-benchmark: the engine's fused AdamW pass (on 1 and 2 threads) against libtorch's
// torch::optim::AdamW (1 thread) on the same number of elements, side by side in one run.
//   build/bench/zs_bench_adamw --benchmark_min_time=0.5
#include "zeroshard/optim.h"

#include <benchmark/benchmark.h>
#include <torch/torch.h>

static void BM_FusedAdamW(benchmark::State& state) {
  torch::set_num_threads(static_cast<int>(state.range(1)));
  const int64_t n = state.range(0);
  auto p = torch::randn({n}), g = torch::randn({n}), m = torch::zeros({n}), v = torch::zeros({n});
  zeroshard::AdamWOptions o;
  int64_t t = 0;
  for (auto _ : state) {
    zeroshard::adamw_update(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n,
                            zeroshard::AdamWStep::make(o, 1e-3, ++t));
  }
  state.SetItemsProcessed(state.iterations() * n);
}

static void BM_TorchOptimAdamW(benchmark::State& state) {
  torch::set_num_threads(1);
  const int64_t n = state.range(0);
  auto p = torch::randn({n}).requires_grad_(true);
  p.mutable_grad() = torch::randn({n});
  torch::optim::AdamW optim({p}, torch::optim::AdamWOptions(1e-3));
  for (auto _ : state) optim.step();
  state.SetItemsProcessed(state.iterations() * n);
}

BENCHMARK(BM_FusedAdamW)->ArgNames({"n", "threads"})->Args({1 << 16, 1})->Args({1 << 22, 1})->Args({1 << 22, 2});
BENCHMARK(BM_TorchOptimAdamW)->Arg(1 << 16)->Arg(1 << 22);
BENCHMARK_MAIN();
