// One Wan 2.1 DiT block at its published 1.3B size (models::wan::wan21_t2v_1_3b(): dim 1536,
// 12 heads, FFN 8960) forward + backward on a real video latent: 480x832 pixels, 81 frames ->
// the VAE's 21 x 60 x 104 latent -> 2x2 patches: 21 x 30 x 52 = 32,760 tokens, with 512 text
// tokens for cross-attention. Prints the time and the peak of tensor bytes counted at the
// allocator (parameters, their gradients, inputs and activations together). Not a test; see
// docs/benchmarks.md.
//
//   build/bench/zs_bench_wan_block [--frames 81] [--height 480] [--width 832] [--dtype fp32|bf16]
//       [--bf16-matmul auto|native|via_fp32] [--threads N] [--steps N]
#include "models/wan/dit.h"
#include "nn/matmul.h"
#include "nn/rope.h"
#include "util/tensor_memory.h"
#include "util/threads.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

using namespace zeroshard;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t frames = 81, height = 480, width = 832, steps = 1;
    int threads = 0;
    std::string dtype_name = "fp32", bf16_matmul = "auto";
    for (int i = 1; i < argc; ++i) {
      const std::string key = argv[i];
      if (i + 1 >= argc) throw std::invalid_argument(key + " needs a value");
      const std::string value = argv[++i];
      if (key == "--frames") frames = std::stoll(value);
      else if (key == "--height") height = std::stoll(value);
      else if (key == "--width") width = std::stoll(value);
      else if (key == "--dtype") dtype_name = value;
      else if (key == "--bf16-matmul") bf16_matmul = value;
      else if (key == "--threads") threads = std::stoi(value);
      else if (key == "--steps") steps = std::stoll(value);
      else throw std::invalid_argument("unknown argument " + key + " (see the comment at the top of bench_wan_block.cpp)");
    }
    if (dtype_name != "fp32" && dtype_name != "bf16") throw std::invalid_argument("--dtype: expected fp32 or bf16");
    const auto dtype = dtype_name == "bf16" ? at::kBFloat16 : at::kFloat;
    if (threads > 0) util::set_compute_threads(threads);
    nn::set_bf16_matmul(nn::parse_bf16_matmul(bf16_matmul));
    util::track_tensor_memory();

    const models::wan::WanDiTConfig c = models::wan::wan21_t2v_1_3b();
    // Wan 2.1's VAE: 4x temporal (first frame alone), 8x spatial; then the DiT's patch size.
    const int64_t lf = 1 + (frames - 1) / 4, lh = height / 8, lw = width / 8;
    const int64_t f = lf / c.patch_size[0], h = lh / c.patch_size[1], w = lw / c.patch_size[2], n = f * h * w;
    std::printf("Wan 2.1 1.3B block: dim %lld, %lld heads, ffn %lld; latent %lldx%lldx%lld -> %lld tokens, text %lld; "
                "%s, bf16 products %s, threads %d\n",
                static_cast<long long>(c.dim), static_cast<long long>(c.num_heads), static_cast<long long>(c.ffn_dim),
                static_cast<long long>(lf), static_cast<long long>(lh), static_cast<long long>(lw),
                static_cast<long long>(n), static_cast<long long>(c.text_len), dtype_name.c_str(),
                nn::bf16_matmul_name(nn::resolved_bf16_matmul()).c_str(), at::get_num_threads());

    torch::manual_seed(0);
    models::wan::WanAttentionBlock block(c);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : block->parameters()) p.normal_(0.0, 0.02);
    }
    block->to(dtype);
    const at::Tensor x = (at::randn({1, n, c.dim}) * 0.5).to(dtype).requires_grad_(true);
    const at::Tensor e0 = (at::randn({1, 6, c.dim}) * 0.1).to(dtype);
    const at::Tensor context = at::randn({1, c.text_len, c.dim}).to(dtype);
    const nn::RopeAngles angles = nn::rope_angles(nn::grid_positions(f, h, w), c.rope_axes_dim(), 10000.0, at::kDouble);
    const at::Tensor grad_out = at::randn({1, n, c.dim}).to(dtype);
    std::printf("tensor bytes before the step (parameters, inputs): %.2f GiB\n", gib(util::live_tensor_bytes()));

    for (int64_t s = 0; s < steps; ++s) {
      block->zero_grad();
      util::reset_peak_tensor_bytes();
      auto t0 = std::chrono::steady_clock::now();
      at::Tensor y = block->forward(x, e0, context, angles.cos, angles.sin, at::Tensor());
      const double forward_s = seconds_since(t0);
      const int64_t after_forward = util::live_tensor_bytes();
      t0 = std::chrono::steady_clock::now();
      y.backward(grad_out);
      const double backward_s = seconds_since(t0);
      std::printf("step %lld: forward %.1f s, backward %.1f s; live after forward %.2f GiB; peak %.2f GiB\n",
                  static_cast<long long>(s + 1), forward_s, backward_s, gib(after_forward),
                  gib(util::peak_tensor_bytes()));
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zs_bench_wan_block: %s\n", e.what());
    return 1;
  }
  return 0;
}
