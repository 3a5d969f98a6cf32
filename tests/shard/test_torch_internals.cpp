// Pins the libtorch behaviour the engine relies on (docs/porting.md): each test states one
// fact about libtorch 1.13.1 that a libtorch upgrade could change, so the upgrade fails here,
// by name, instead of as a wrong loss somewhere else.
#include "shard/torch_internals.h"
#include "util/tensor_memory.h"
#include "zeroshard/nn/deferred.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <string>
#include <vector>

using namespace zeroshard;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

// The engine frees a gathered unit's bytes after forward and refills them before backward
// (torch_internals.h: release_storage_bytes / allocate_storage_bytes, FSDP's resize to 0 and
// back). Relied on: the storage object survives, so the parameter views and the views
// autograd saved see the new bytes; refilling by raw writes (as a collective does) does not
// trip autograd's saved-variable version check; gradients equal a run that never freed.
TEST(TorchInternals, FreedStorageBytesKeepSavedViewsValidOnceRefilled) {
  at::manual_seed(3);
  const at::Tensor values = at::randn({16});
  at::Tensor flat = values.clone();
  at::Tensor w = at::empty({3, 4}).requires_grad_(true);
  {
    at::NoGradGuard no_grad;
    w.set_data(flat.narrow(0, 2, 12).view({3, 4}));
  }
  const at::Tensor x = at::randn({2, 3}).requires_grad_(true);
  const at::Tensor loss = at::tanh(x.matmul(w)).square().sum();  // matmul saves w (a view of flat)

  at::Tensor w_ref = values.narrow(0, 2, 12).view({3, 4}).clone().requires_grad_(true);
  at::Tensor x_ref = x.detach().clone().requires_grad_(true);
  at::tanh(x_ref.matmul(w_ref)).square().sum().backward();

  c10::StorageImpl* storage = flat.storage().unsafeGetStorageImpl();
  shard::release_storage_bytes(flat);
  EXPECT_EQ(flat.storage().nbytes(), 0u);
  EXPECT_EQ(flat.storage().data(), nullptr);
  EXPECT_EQ(w.storage().unsafeGetStorageImpl(), storage) << "the parameter still views the same storage";
  shard::allocate_storage_bytes(flat, 16 * sizeof(float));
  EXPECT_EQ(flat.storage().unsafeGetStorageImpl(), storage);
  EXPECT_EQ(flat.storage().nbytes(), 16 * sizeof(float));
  std::memcpy(flat.data_ptr<float>(), values.data_ptr<float>(), 16 * sizeof(float));  // as a gather writes
  EXPECT_EQ(w.data_ptr<float>(), flat.data_ptr<float>() + 2) << "the view follows the new bytes";

  loss.backward();
  EXPECT_TRUE(at::equal(w.grad(), w_ref.grad()));
  EXPECT_TRUE(at::equal(x.grad(), x_ref.grad()));
}

// The engine's pool of freed buffer bytes: a freed buffer's block serves the next buffer of its
// size (the same address), views of a pooled buffer follow its new bytes, two buffers live at
// once get two blocks, and blocks under the pool's minimum go back to malloc.
TEST(TorchInternals, StorageBytesPoolReusesAFreedBlockForTheNextBufferOfItsSize) {
  shard::StorageBytesPool pool(64);
  at::Tensor a = at::empty({32});  // 128 bytes
  at::Tensor b = at::empty({32});
  at::Tensor view = a.narrow(0, 4, 8);
  const void* a_bytes = a.data_ptr();
  pool.release(a);
  EXPECT_EQ(a.storage().nbytes(), 0u);
  EXPECT_EQ(pool.pooled_bytes(), 128u);
  pool.allocate(b.narrow(0, 0, 1), 128);  // b's storage takes a's old block
  EXPECT_EQ(b.data_ptr(), a_bytes);
  EXPECT_EQ(pool.pooled_bytes(), 0u);
  pool.allocate(a, 128);  // the pool is empty: fresh bytes, not b's
  EXPECT_NE(a.data_ptr(), b.data_ptr());
  a.fill_(7.0f);
  EXPECT_EQ(view.data_ptr<float>(), a.data_ptr<float>() + 4) << "views follow the new bytes";
  EXPECT_TRUE(at::equal(view, at::full({8}, 7.0f)));
  b.fill_(1.0f);
  EXPECT_TRUE(at::equal(a, at::full({32}, 7.0f))) << "two live buffers never share a block";

  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.pooled_bytes(), 256u);
  at::Tensor c = at::empty({16});  // 64 bytes: another size than the pooled ones
  pool.allocate(c, 64);
  EXPECT_EQ(pool.pooled_bytes(), 256u);
  at::Tensor small = at::empty({8});  // 32 bytes, under the minimum
  pool.release(small);
  EXPECT_EQ(small.storage().nbytes(), 0u);
  EXPECT_EQ(pool.pooled_bytes(), 256u) << "a block under the minimum is freed, not kept";
}

// FlatParam::materialize: Tensor::set_data turns a module's parameter (also a deferred one,
// nn/deferred.cpp) into a view of the flat buffer in place: same TensorImpl (the module's
// handles keep working), requires_grad kept, gradients of the parameter's shape.
TEST(TorchInternals, SetDataMakesAModuleParameterAViewOfTheFlatBuffer) {
  torch::nn::Linear lin(3, 4);
  const void* impl = lin->weight.unsafeGetTensorImpl();
  at::Tensor flat = at::arange(20, at::kFloat);
  {
    at::NoGradGuard no_grad;
    lin->weight.set_data(flat.narrow(0, 4, 12).view({4, 3}));
  }
  EXPECT_EQ(lin->named_parameters()["weight"].unsafeGetTensorImpl(), impl);
  EXPECT_EQ(lin->weight.data_ptr<float>(), flat.data_ptr<float>() + 4);
  EXPECT_TRUE(lin->weight.requires_grad());
  lin->forward(at::ones({2, 3})).sum().backward();
  ASSERT_TRUE(lin->weight.grad().defined());
  EXPECT_EQ(lin->weight.grad().sizes(), at::IntArrayRef({4, 3}));
  EXPECT_TRUE(at::equal(flat, at::arange(20, at::kFloat))) << "backward must not write into the buffer";

  at::Tensor deferred = nn::deferred_empty({2, 5});
  EXPECT_TRUE(nn::is_deferred(deferred));
  EXPECT_EQ(deferred.numel(), 10);
  EXPECT_EQ(deferred.storage().data(), nullptr) << "a deferred tensor has a shape but no bytes";
  const void* deferred_impl = deferred.unsafeGetTensorImpl();
  {
    at::NoGradGuard no_grad;
    deferred.set_data(flat.narrow(0, 0, 10).view({2, 5}));
  }
  EXPECT_FALSE(nn::is_deferred(deferred));
  EXPECT_EQ(deferred.unsafeGetTensorImpl(), deferred_impl);
  EXPECT_TRUE(at::equal(deferred, at::arange(10, at::kFloat).view({2, 5})));
}

// The hook order the engine is built on: in backward, a unit's pre-backward hook (on its
// outputs) runs first, then its parameters' gradients are accumulated — completely, also
// for a parameter used twice — and only then its post-backward node (on its inputs) runs.
// Two units in a row run in reverse order.
TEST(TorchInternals, BackwardRunsPreHookThenParameterGradientsThenPostBackwardNode) {
  at::manual_seed(5);
  at::Tensor wa = at::randn({4, 4}).requires_grad_(true), wb = at::randn({4, 2}).requires_grad_(true);
  std::vector<std::string> events;
  at::Tensor wa_grad_at_post, wb_grad_at_post;
  std::function<void()> post_a = [&] {
    events.push_back("post a");
    wa_grad_at_post = wa.grad().defined() ? wa.grad().clone() : at::Tensor();
  };
  std::function<void()> post_b = [&] {
    events.push_back("post b");
    wb_grad_at_post = wb.grad().defined() ? wb.grad().clone() : at::Tensor();
  };
  auto unit = [&](at::Tensor x, const at::Tensor& w, std::function<void()>* post, const std::string& name) {
    std::vector<at::Tensor> in{x};
    EXPECT_TRUE(shard::attach_post_backward(in, post));
    at::Tensor h = in[0].matmul(w);
    std::vector<at::Tensor> out{at::tanh(h) + (w.size(1) == 4 ? in[0].matmul(w) : h)};  // unit a uses w twice
    EXPECT_TRUE(shard::attach_pre_backward(out, [&events, name] { events.push_back("pre " + name); }));
    return out[0];
  };
  const at::Tensor x = at::randn({3, 4}).requires_grad_(true);
  const at::Tensor y = unit(unit(x, wa, &post_a, "a"), wb, &post_b, "b");
  y.square().sum().backward();
  EXPECT_EQ(events, (std::vector<std::string>{"pre b", "post b", "pre a", "post a"}));
  ASSERT_TRUE(wa_grad_at_post.defined()) << "post-backward ran before the parameter's gradient was accumulated";
  ASSERT_TRUE(wb_grad_at_post.defined());
  EXPECT_TRUE(at::equal(wa_grad_at_post, wa.grad())) << "a part of the gradient arrived after post-backward";
  EXPECT_TRUE(at::equal(wb_grad_at_post, wb.grad()));
}

// attach_post_backward's node is a custom autograd::Function applied to an at::TensorList
// plus a non-tensor argument (the callback's address): apply() must track the list's tensors
// as graph inputs (a std::vector would be taken for a non-tensor and cut the graph), pass
// gradients through unchanged, and leave inputs that need no gradient alone.
TEST(TorchInternals, CustomFunctionTracksTensorListInputs) {
  int calls = 0;
  std::function<void()> callback = [&] { ++calls; };
  const at::Tensor a = at::randn({3}).requires_grad_(true);
  const at::Tensor b = at::randn({3});
  std::vector<at::Tensor> in{a, b, at::Tensor()};
  ASSERT_TRUE(shard::attach_post_backward(in, &callback));
  EXPECT_NE(in[0].unsafeGetTensorImpl(), a.unsafeGetTensorImpl());
  EXPECT_TRUE(in[0].grad_fn() != nullptr) << "the list's tensor was not tracked";
  EXPECT_EQ(in[1].unsafeGetTensorImpl(), b.unsafeGetTensorImpl());
  EXPECT_FALSE(in[2].defined());
  (in[0] * b).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(at::equal(a.grad(), b));
  std::vector<at::Tensor> none{b};
  EXPECT_FALSE(shard::attach_post_backward(none, &callback));
}

// A unit's output whose gradient never arrives while a sibling output's does (a video VAE's
// cache frames after the last chunk): libtorch calls that output's hook with an undefined
// tensor. Registered through TensorBase (attach_pre_backward) that must not fail.
TEST(TorchInternals, PreBackwardHookSurvivesAnOutputWithoutGradient) {
  const at::Tensor x = at::randn({4, 2}).requires_grad_(true);
  const std::vector<at::Tensor> parts = (x * 2).chunk(2);  // one node, two outputs
  int calls = 0;
  ASSERT_TRUE(shard::attach_pre_backward(parts, [&calls] { ++calls; }));
  EXPECT_NO_THROW(parts[0].sum().backward());
  EXPECT_GE(calls, 1);
  EXPECT_TRUE(at::equal(x.grad(), at::cat({at::full({2, 2}, 2.0f), at::zeros({2, 2})})));
}

// util/tensor_memory.cpp wraps c10's CPU allocator (SetCPUAllocator with a priority above
// the default's): every CPU tensor then allocates through it, counted at its requested size,
// and so do the bytes the engine gives a gathered buffer (allocate_storage_bytes uses
// GetCPUAllocator).
TEST(TorchInternals, CountingCpuAllocatorSeesTensorsAndTheEnginesBuffers) {
  util::track_tensor_memory();
  ASSERT_TRUE(util::tensor_memory_tracked());
  const int64_t n = int64_t{1} << 20;
  const int64_t before = util::live_tensor_bytes();
  {
    const at::Tensor t = at::empty({n}, at::kFloat);
    EXPECT_EQ(util::live_tensor_bytes() - before, n * 4);
  }
  EXPECT_EQ(util::live_tensor_bytes(), before);
  at::Tensor flat = at::empty({n}, at::kFloat);
  shard::release_storage_bytes(flat);
  EXPECT_EQ(util::live_tensor_bytes(), before);
  shard::allocate_storage_bytes(flat, static_cast<size_t>(n * 4));
  EXPECT_EQ(util::live_tensor_bytes() - before, n * 4);
  shard::release_storage_bytes(flat);
  EXPECT_EQ(util::live_tensor_bytes(), before);
}

// Seeded initialization (nn/init.cpp) draws from at::CPUGeneratorImpl with at::normal: the
// weights every run starts from, hence every loss and every checkpoint's meaning, depend on
// libtorch's mt19937 stream and normal sampling (scalar below 16 elements, 16-wide Box-Muller
// above). Golden bits from Debian's python3-torch 1.13 on this machine class (AVX2):
//   g = torch.Generator().manual_seed(seed); torch.normal(0.0, std, (n,), generator=g)
TEST(TorchInternals, SeededNormalDrawsMatchTheReferenceBits) {
  struct Case {
    uint64_t seed;
    double std;
    std::vector<uint32_t> golden;
  };
  const Case cases[] = {
      {12345, 0.3, {0x3edb350d, 0xbf0f9f73, 0xbeb7bce8, 0xbf1cf9b8, 0xbe0c148f, 0xbedb9048, 0xbe5c6d3d}},
      {987654321, 1.0, {0xbf093946, 0xbe6c59bf, 0xbf37cf61, 0xbfb499ad, 0xc02facae, 0xbf8afa5a, 0xbef95431, 0x3e910a70,
                        0x3fb6100b, 0x3ebfb026, 0x3eec6059, 0xbf98ee88, 0xbcdbe9c0, 0x3ee436ed, 0xbf5a8896, 0x3f36cc35,
                        0x3ff9d8ff, 0x4020f1ab, 0x3fdf7fbe, 0x3f4618be, 0xbf2260b7, 0xbf5a7f31, 0x3f87de6f, 0xbec66f3d,
                        0xbfbf1635, 0xbf3525c3, 0xbe5a39f2, 0x3efd4ff4, 0xbf36922c, 0xc01d8b3a, 0xbfefe975, 0x3ddb4adb,
                        0xbfa1bb85, 0x3f70ed1a, 0x3d5420cc, 0xbf9e775e, 0xbeb24449, 0x3f8c83d8, 0x3f729db8, 0xbfe6bfcf}},
  };
  for (const Case& c : cases) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(c.seed);
    const int64_t n = static_cast<int64_t>(c.golden.size());
    const at::Tensor t = at::normal(0.0, c.std, {n}, gen);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(bits(t[i].item<float>()), c.golden[static_cast<size_t>(i)]) << "seed " << c.seed << " element " << i;
    }
  }
}

// Checkpoints store the default CPU generator's state (rng.cpu, src/checkpoint) as the byte
// tensor get_state returns and restore it with set_state: the round trip must give the same
// draws.
TEST(TorchInternals, GeneratorStateRoundTripsThroughItsByteTensor) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  at::Tensor state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(77);
    state = gen.get_state();
  }
  EXPECT_EQ(state.scalar_type(), at::kByte);
  const at::Tensor first = at::randn({20});
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
  EXPECT_TRUE(at::equal(at::randn({20}), first));
}
