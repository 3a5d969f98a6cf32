// The zoo's matrix products — linear layers, batched matmuls (attention), 3-D convolutions —
// in one place, so that bf16 compute runs at the speed the CPU offers.
//
// fp32 tensors go to libtorch's products (a linear layer without bias through an autograd
// function of our own with libtorch's bits: its weight gradient is a tensor autograd can add a
// tied embedding's rows into, src/nn/matmul.cpp). For bf16 tensors there are two kernels:
//  - native: libtorch's bf16 kernels (oneDNN). Fast where the CPU has bf16 dot-product
//    instructions (AVX512-BF16, AMX); on a CPU without them libtorch 1.13 falls back to a
//    scalar loop, measured 40-85x slower than fp32 here (docs/benchmarks.md).
//  - via_fp32: the bf16 operands are widened to fp32 (exactly: every bf16 value is an fp32
//    value, and so is the product of two), multiplied by the fp32 GEMM with fp32 accumulation,
//    and the result rounded once to bf16 — the arithmetic of a bf16 GEMM with fp32
//    accumulation. Autograd keeps the bf16 operands (half the activation bytes of fp32),
//    widening them again in backward.
// `auto` picks native where /proc/cpuinfo lists bf16 dot-product instructions, via_fp32
// otherwise: deterministic per machine, so every rank and every run computes alike.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <string>

namespace zeroshard::nn {

enum class Bf16Matmul { Auto, Native, ViaFp32 };

// "auto" | "native" | "via_fp32"; throws std::invalid_argument listing them otherwise.
Bf16Matmul parse_bf16_matmul(const std::string& name);
std::string bf16_matmul_name(Bf16Matmul mode);
// True when the CPU lists bf16 dot-product instructions (avx512_bf16, amx_bf16; bf16 on Arm).
bool cpu_has_bf16_dot_product();

// Process-wide kernel choice for bf16 products (the trainer sets it from
// mixed_precision.bf16_matmul); Auto resolves on first use.
void set_bf16_matmul(Bf16Matmul mode);
Bf16Matmul resolved_bf16_matmul();  // Native or ViaFp32

// y = x w^T (+ b): x [..., in], w [out, in], b [out] or undefined.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});
// a [..., M, K] @ b [..., K, N]; bf16 via fp32 needs equal batch dimensions (broadcast
// batches take a slower composite path).
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b);
// c += a @ b per batch, c's fp32 accumulated in fp32 (beta = 1), or c = a @ b (beta = 0): a [N, M, K]
// and b [N, K, N'] bf16, each matrix with unit stride along one of its two dimensions (a tile, or
// its transposed view), c [N, M, N'] fp32 with unit stride along its last dimension. The product
// of oneDNN's bf16 GEMM with an fp32 result (bf16 operands exactly, fp32 accumulation), the kernel
// libtorch's bf16 products run on, without their rounding of the result to bf16; found at run time
// in the oneDNN libtorch loaded (it exports `dnnl_gemm_bf16bf16f32`; version 2.6's header does not
// declare it, later ones do). Returns false, computing nothing, where that function is absent or
// does not run on this CPU (oneDNN has it for AVX-512 only), or the layouts do not fit it: the caller
// then takes libtorch's products.
bool bmm_bf16_into_fp32(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float beta);
// Whether that GEMM is there and runs on this CPU (then bmm_bf16_into_fp32 refuses only layouts it
// cannot take).
bool has_bf16_gemm_with_fp32_result();

// 3-D convolution, dilation 1, groups 1.
at::Tensor conv3d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, std::array<int64_t, 3> stride,
                  std::array<int64_t, 3> padding);
// 2-D convolution, dilation 1, groups 1 (the image VAEs).
at::Tensor conv2d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding);

}  // namespace zeroshard::nn
