// One rank of a multi-rank test. Started by the tests through support/spawn.h with the
// environment rendezvous; writes its findings under OUTDIR and exits 0 (pass), 3 (a check
// failed, message on stderr) or 1 (an unexpected error).
//
//   zs_test_worker collectives OUTDIR
//   zs_test_worker stall OUTDIR          rank 1 never joins; rank 0 must time out clearly
//   zs_test_worker die OUTDIR            rank 1 exits mid-job; rank 0 must fail fast
//   zs_test_worker toy OUTDIR STRATEGY [not_last]   train the toy model, dump shards/params/norms
//                                        (not_last: every micro-batch claims not to be the last)
//   zs_test_worker memory OUTDIR STRATEGY
#include "io/safetensors.h"
#include "models/llama/llama.h"
#include "support/toy_model.h"
#include "util/threads.h"
#include "zeroshard/comm.h"
#include "zeroshard/optim.h"
#include "zeroshard/shard.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

using namespace zeroshard;

namespace {

int g_failures = 0;
#define CHECK_W(cond, msg)                                                           \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::ostringstream _m;                                                         \
      _m << msg;                                                                     \
      std::fprintf(stderr, "CHECK FAILED (%s:%d): %s\n", __FILE__, __LINE__, _m.str().c_str()); \
      ++g_failures;                                                                  \
    }                                                                                \
  } while (0)

template <typename T>
void check_collectives_typed(Communicator& comm, at::ScalarType dtype) {
  const int W = comm.world_size(), r = comm.rank();
  for (int64_t n : {0, 1, 5, 7, 1000, 4099}) {
    // all_gather: rank q contributes q*10000 + i.
    at::Tensor in = at::arange(n, dtype).add_(r * 10000);
    at::Tensor out = at::full({n * W}, -1, dtype);
    comm.all_gather(in, out);
    const T* o = out.data_ptr<T>();
    for (int q = 0; q < W; ++q) {
      for (int64_t i = 0; i < n; ++i) {
        CHECK_W(o[q * n + i] == static_cast<T>(q * 10000 + i), "all_gather n=" << n << " q=" << q << " i=" << i);
      }
    }
    // reduce_scatter: rank q contributes (q+1)*(k+1) at global index k; sum = (k+1)*W(W+1)/2.
    at::Tensor rs_in = at::arange(n * W, dtype).add_(1).mul_(r + 1);
    at::Tensor rs_out = at::full({n}, -1, dtype);
    const CommStats before = comm.stats();
    comm.reduce_scatter(rs_in, rs_out);
    const CommStats after = comm.stats();
    if (comm.backend_name() == "gloo") {
      CHECK_W(after.bytes_sent - before.bytes_sent == static_cast<int64_t>((W - 1) * n * sizeof(T)),
              "reduce_scatter must send (W-1)/W of the buffer: sent " << after.bytes_sent - before.bytes_sent);
    }
    const T* ro = rs_out.data_ptr<T>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = r * n + i;
      CHECK_W(ro[i] == static_cast<T>((k + 1) * W * (W + 1) / 2), "reduce_scatter n=" << n << " i=" << i << " got " << ro[i]);
    }
    // An output inside the input (as NCCL allows) is refused: the ring writes partial sums into
    // the output while later hops still read the input.
    if (comm.backend_name() == "gloo" && W > 1 && n > 0) {
      at::Tensor both = at::arange(n * W, dtype);
      std::string what;
      try {
        comm.reduce_scatter(both, both.narrow(0, r * n, n));
      } catch (const std::exception& e) {
        what = e.what();
      }
      CHECK_W(what.find("reduce_scatter: the output shares storage with the input") != std::string::npos,
              "in-place reduce_scatter must be refused, got: " << what);
    }
    // all_reduce (n not a multiple of W): rank q contributes q + i.
    at::Tensor ar = at::arange(n, dtype).add_(r);
    comm.all_reduce(ar);
    const T* a = ar.data_ptr<T>();
    for (int64_t i = 0; i < n; ++i) {
      CHECK_W(a[i] == static_cast<T>(W * i + W * (W - 1) / 2), "all_reduce n=" << n << " i=" << i << " got " << a[i]);
    }
    // broadcast from the last rank.
    at::Tensor b = r == W - 1 ? at::arange(n, dtype).mul_(3) : at::zeros({n}, dtype);
    comm.broadcast(b, W - 1);
    for (int64_t i = 0; i < n; ++i) CHECK_W(b.data_ptr<T>()[i] == static_cast<T>(3 * i), "broadcast i=" << i);
  }
}

int scenario_collectives(const std::string& out) {
  auto comm = make_communicator(RendezvousInfo::from_env(), CommOptions{std::chrono::seconds(60), std::chrono::seconds(60)});
  check_collectives_typed<float>(*comm, at::kFloat);
  check_collectives_typed<double>(*comm, at::kDouble);
  check_collectives_typed<int64_t>(*comm, at::kLong);
  // Async: three collectives in flight, waited in reverse order.
  const int W = comm->world_size(), r = comm->rank();
  at::Tensor g_out = at::empty({3 * W}, at::kFloat), rs_out = at::empty({2}, at::kFloat);
  at::Tensor ar = at::full({5}, static_cast<float>(r + 1));
  auto h1 = comm->all_gather_async(at::full({3}, static_cast<float>(r)), g_out);
  auto h2 = comm->reduce_scatter_async(at::ones({2 * W}, at::kFloat), rs_out);
  auto h3 = comm->all_reduce_async(ar);
  h3->wait();
  h2->wait();
  h1->wait();
  CHECK_W(h1->completed() && h2->completed() && h3->completed(), "handles report completion");
  for (int q = 0; q < W; ++q) CHECK_W(g_out[q * 3].item<float>() == q, "async all_gather");
  CHECK_W(rs_out[0].item<float>() == W, "async reduce_scatter");
  CHECK_W(ar[0].item<float>() == W * (W + 1) / 2, "async all_reduce");
  // split: ranks of one parity form a group, ranked in job order; the groups run
  // collectives independently (here at the same time, with different sizes).
  auto group = comm->split(r % 2);
  const int members = (W - r % 2 + 1) / 2;
  CHECK_W(group->world_size() == members && group->rank() == r / 2,
          "split: rank " << r << " is " << group->rank() << " of " << group->world_size());
  at::Tensor gs = at::full({7 + r % 2}, static_cast<double>(r), at::kDouble);
  group->all_reduce(gs);
  double expect = 0;
  for (int q = r % 2; q < W; q += 2) expect += q;
  CHECK_W(gs[0].item<double>() == expect, "split all_reduce: " << gs[0].item<double>() << " != " << expect);
  comm->barrier();
  std::ofstream(out + "/rank" + std::to_string(r) + ".ok") << "ok\n";
  return g_failures ? 3 : 0;
}

int scenario_stall(const std::string& out) {
  CommOptions options;
  options.timeout = std::chrono::milliseconds(1500);
  auto comm = make_communicator(RendezvousInfo::from_env(), options);
  if (comm->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(6));  // never joins the collective
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    comm->all_gather(at::ones({4}), at::empty({4 * comm->world_size()}));
  } catch (const CommError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ofstream(out + "/error.txt") << e.what() << "\n" << s << "\n";
    return 0;
  }
  std::fprintf(stderr, "all_gather with a stalled peer returned\n");
  return 3;
}

int scenario_die(const std::string& out) {
  auto comm = make_communicator(RendezvousInfo::from_env(), CommOptions{std::chrono::seconds(60), std::chrono::seconds(60)});
  comm->barrier();
  if (comm->rank() == 1) _exit(7);  // dies without a word
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    at::Tensor t = at::ones({1000});
    for (int i = 0; i < 100; ++i) comm->all_reduce(t);
  } catch (const CommError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ofstream(out + "/error.rank" + std::to_string(comm->rank()) + ".txt") << e.what() << "\n" << s << "\n";
    return 0;
  }
  std::fprintf(stderr, "all_reduce with a dead peer returned\n");
  return 3;
}

int scenario_toy(const std::string& out, const std::string& strategy, bool not_last) {
  util::set_compute_threads(1);
  auto comm = make_communicator(RendezvousInfo::from_env(), CommOptions{std::chrono::seconds(60), std::chrono::seconds(60)});
  const int W = comm->world_size(), r = comm->rank();
  testing::ToyModel model;
  model->reset(7);
  auto sharded = fully_shard(model.ptr(), comm, {parse_strategy(strategy)});
  AdamWOptions o;
  o.lr = testing::ToyRun::kLr;
  o.weight_decay = testing::ToyRun::kWeightDecay;
  ShardedAdamW optim(sharded, o);
  std::ostringstream norms, losses;
  norms.precision(17);
  losses.precision(9);
  for (int step = 0; step < testing::ToyRun::kSteps; ++step) {
    for (int micro = 0; micro < testing::ToyRun::kAccum; ++micro) {
      const int64_t first = (micro * W + r) * testing::ToyModelImpl::kMicroBatch;
      auto batch = testing::toy_batch(step, first);
      auto logits = model->forward(batch.narrow(1, 0, testing::ToyModelImpl::kSeq));
      auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, testing::ToyModelImpl::kVocab}),
                                                       batch.narrow(1, 1, testing::ToyModelImpl::kSeq).reshape({-1}));
      sharded->backward(loss, /*last_micro_batch=*/!not_last);
      losses << loss.item<float>() << "\n";
    }
    norms << sharded->finish_gradients(testing::ToyRun::kClip) << "\n";
    optim.step(testing::ToyRun::lr_at(step));
  }
  {
    std::ofstream f(out + "/shard.rank" + std::to_string(r) + ".bin", std::ios::binary);
    for (const auto& t : sharded->local_shards()) f.write(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  std::ofstream(out + "/losses.rank" + std::to_string(r) + ".txt") << losses.str();
  io::write_full_parameters(*sharded, out + "/params.safetensors");  // a collective
  if (r == 0) std::ofstream(out + "/norms.txt") << norms.str();
  return g_failures ? 3 : 0;
}

int scenario_memory(const std::string& out, const std::string& strategy) {
  util::set_compute_threads(1);
  auto comm = make_communicator(RendezvousInfo::from_env(), CommOptions{std::chrono::seconds(60), std::chrono::seconds(60)});
  models::LlamaConfig c;
  c.dim = 256;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 688;
  c.max_seq_len = 32;
  models::Llama model(c);
  model->reset_parameters(1);
  ShardOptions options(parse_strategy(strategy));
  options.prefetch = false;  // the formula's one gathered unit at a time (prefetch: tests/train/test_overlap.cpp)
  auto sharded = fully_shard(model.ptr(), comm, options);
  ShardedAdamW optim(sharded, AdamWOptions{});
  auto tokens = torch::randint(0, 256, {2, 17}, torch::kLong);
  auto loss = models::lm_loss(model->forward(tokens.narrow(1, 0, 16)), tokens.narrow(1, 1, 16));
  sharded->backward(loss);
  sharded->finish_gradients(1.0);
  optim.step(1e-3);
  const MemoryStats m = sharded->memory();
  nlohmann::json j = {{"num_params", m.num_params},          {"params_bytes", m.params_bytes},
                      {"grads_bytes", m.grads_bytes},        {"optim_bytes", m.optim_bytes},
                      {"gathered_peak_bytes", m.gathered_peak_bytes}, {"gathered_bytes", m.gathered_bytes},
                      {"largest_unit_bytes", m.largest_unit_bytes}, {"analytic_params", c.num_params()}};
  std::ofstream(out + "/mem." + strategy + ".rank" + std::to_string(comm->rank()) + ".json") << j.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: zs_test_worker SCENARIO OUTDIR [STRATEGY]\n");
    return 2;
  }
  const std::string scenario = argv[1], out = argv[2];
  const std::string strategy = argc > 3 ? argv[3] : "";
  try {
    if (scenario == "collectives") return scenario_collectives(out);
    if (scenario == "stall") return scenario_stall(out);
    if (scenario == "die") return scenario_die(out);
    if (scenario == "toy") return scenario_toy(out, strategy, argc > 4 && std::string(argv[4]) == "not_last");
    if (scenario == "memory") return scenario_memory(out, strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker %s (rank %s): %s\n", scenario.c_str(), std::getenv("RANK"), e.what());
    return 1;
  }
  std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
  return 2;
}
