// The README's library example, compiled and run by the tests: shard your own module.
//
//   build/examples/zs_example_custom_model      one process
//   RANK=r WORLD_SIZE=w MASTER_ADDR=host MASTER_PORT=port build/examples/zs_example_custom_model
//                                                one rank of a job (start w of them)
//
// A residual MLP regressor: each block is a unit (a HookableModule running its forward
// through call_hooked); the input projection and the head stay in the root unit.
#include <zeroshard/comm.h>
#include <zeroshard/nn/hookable.h>
#include <zeroshard/optim.h>
#include <zeroshard/shard.h>

#include <torch/torch.h>

#include <cstdio>

struct BlockImpl : zeroshard::nn::HookableModule {
  explicit BlockImpl(int64_t d) {
    fc1 = register_module("fc1", torch::nn::Linear(d, 4 * d));
    fc2 = register_module("fc2", torch::nn::Linear(4 * d, d));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return call_hooked(x, [this](const torch::Tensor& in) { return in + fc2(torch::gelu(fc1(in))); });
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

struct RegressorImpl : zeroshard::nn::HookableModule {
  RegressorImpl(int64_t in, int64_t d, int64_t depth) {
    proj = register_module("proj", torch::nn::Linear(in, d));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < depth; ++i) blocks->push_back(Block(d));
    head = register_module("head", torch::nn::Linear(d, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return call_hooked(x, [this](const torch::Tensor& in) {
      auto h = proj(in);
      for (const auto& b : *blocks) h = b->as<BlockImpl>()->forward(h);
      return head(h);
    });
  }
  torch::nn::Linear proj{nullptr}, head{nullptr};
  torch::nn::ModuleList blocks{nullptr};
};
TORCH_MODULE(Regressor);

int main() {
  torch::set_num_threads(1);
  auto comm = zeroshard::make_communicator(zeroshard::RendezvousInfo::from_env());
  torch::manual_seed(0);  // same init on every rank (or initialize by parameter name)
  Regressor model(8, 32, 3);
  auto sharded = zeroshard::fully_shard(model.ptr(), comm, zeroshard::Strategy::OptimGradsParams);
  zeroshard::AdamWOptions adam;
  adam.lr = 3e-3;
  zeroshard::ShardedAdamW optim(sharded, adam);
  zeroshard::LrSchedule schedule{3e-3, 3e-4, 10, 200};

  // Target: y = sum(sin(x)); each rank draws its own samples.
  torch::manual_seed(100 + comm->rank());
  double first = 0, last = 0;
  for (int step = 1; step <= 200; ++step) {
    double loss_sum = 0;
    for (int micro = 0; micro < 2; ++micro) {
      auto x = torch::randn({32, 8});
      auto y = x.sin().sum(1, /*keepdim=*/true);
      auto loss = torch::mse_loss(model->forward(x), y);
      sharded->backward(loss);
      loss_sum += loss.item<double>();
    }
    sharded->finish_gradients(/*max_norm=*/1.0);
    optim.step(schedule.at(step));
    if (step <= 10) first += loss_sum / 2 / 10;
    if (step > 190) last += loss_sum / 2 / 10;
  }
  const auto m = sharded->memory();
  std::printf("rank %d of %d: loss %.4f -> %.4f; %lld parameters in %d units; per-rank state %lld bytes\n",
              comm->rank(), comm->world_size(), first, last, static_cast<long long>(m.num_params),
              sharded->num_units(), static_cast<long long>(m.model_state_bytes()));
  return last < 0.5 * first ? 0 : 1;  // the example fails loudly if it stops learning
}
