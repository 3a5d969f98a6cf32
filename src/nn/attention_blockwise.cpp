// Blockwise attention (FlashAttention-2's arithmetic, written with libtorch ops on blocks).
//
// Layout. q [B, H, Tq, D] is packed once into rows [B*Hkv, Tq*G, D] (G = H / Hkv), the G query
// heads of a kv head side by side per position: a block of query positions is then one range of
// rows, and one batched product per block serves all G heads of a kv head (no repeated k, v).
// k, v are [B*Hkv, Tk, D]. The softmax scale is folded into the packed q.
//
// Forward, per query block i and key block j (keys in order):
//   S = Q_i K_j^T; masked entries := lowest float;  m' = max(m, rowmax S);  P = exp(S - m')
//   l = l e^(m - m') + rowsum P;  O_i = O_i e^(m - m') + P V_j
// then O_i /= l and lse_i = m + log l is saved. Backward recomputes P = exp(S - lse) per block:
//   dV_j += P^T dO_i;  dS = P (dO_i V_j^T - rowsum(dO ∘ O));  dQ_i += dS K_j;  dK_j += dS^T Q_i.
// Per block only [B*Hkv, rows, keys] tensors live; everything kept is linear in Tq and Tk.
//
// Masks. A block with no kept pair is skipped, one with every pair kept is not masked at all.
// Masked entries hold the lowest finite float (bf16's for scores a bf16 product returned), as in
// the plain formulation: where a row has a real key its masked entries weigh exactly 0
// (exp(lowest - m) underflows to 0, and a block seen before the first real key is scaled by
// exp(lowest - real) = 0). A row with no real key at
// all ("starved": fully padded, or a segment without keys) gets the plain formulation's value —
// the average of all Tk values — set after the blocks (skipped blocks would otherwise be left
// out of its average); its lse is +inf so that backward's blocks give it P = 0, and its value
// gradient dO / Tk is added to every key. Its q/k gradients are 0, as masked_fill's backward
// gives.
//
// Precision. Scores, softmax and accumulators are float32 (float64 for float64 inputs). bf16
// products follow nn::matmul's routing (src/nn/matmul.h): via_fp32 widens q, k, v once and runs
// every product in fp32 (exact bf16 operands, fp32 accumulation, and P, dS not rounded);
// native runs them on bf16 operands with P, dS, dO rounded to bf16, as FlashAttention does. Where
// oneDNN's bf16 GEMM with an fp32 result is there (nn::bmm_bf16_into_fp32, Plan::fp32_results),
// every product's fp32 result is accumulated into the fp32 sums as it is, as FlashAttention's
// accumulators do; else libtorch's bf16 products round each result to bf16 before it is added.
// dP = dO V^T, which is cancelled against rowsum(dO ∘ O), is never rounded: the GEMM's fp32 result,
// or the fp32 product of the widened operands.
//
// Determinism: the same blocks in the same order with the same ops on every call, so a
// recomputed forward (activation checkpointing) reproduces the bits.
#include "nn/attention_blockwise.h"

#include "nn/matmul.h"

#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace zeroshard::nn {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The value of a masked score in a tensor of `dtype`: the lowest finite float, or bf16's own
// lowest finite value for bf16 scores (float's would round to -inf there).
double masked_score(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest())
                                : static_cast<double>(std::numeric_limits<float>::lowest());
}

// Shapes, masks and arithmetic of one call; rebuilt in backward from the saved fields.
struct Plan {
  int64_t B = 0, H = 0, Hkv = 0, G = 0, Tq = 0, Tk = 0, D = 0, bq = 0, bk = 0;
  double scale = 1.0;
  at::ScalarType in = at::kFloat;    // q's dtype: the output's and the gradients'
  at::ScalarType acc = at::kFloat;   // scores, softmax and accumulators
  at::ScalarType gemm = at::kFloat;  // operands of the block products: acc, or bf16 (native kernel)
  // bf16 products whose fp32 results are used as they are (oneDNN's bf16 GEMM, nn::bmm_bf16_into_fp32):
  // accumulated into the fp32 running sums directly, and dP in fp32 from the bf16 operands.
  bool fp32_results = false;
  bool causal = false;
  at::Tensor key_padding;                   // [B, Tk] bool, or undefined
  at::Tensor query_segments, key_segments;  // [B, Tq], [B, Tk], or undefined
  // Only padding and segments can leave a row without any real key (causal rows see key 0).
  bool may_starve() const { return key_padding.defined() || query_segments.defined(); }
};

Plan make_plan(const at::Tensor& q, const at::Tensor& k, bool causal, double scale, int64_t bq, int64_t bk) {
  Plan p;
  p.B = q.size(0), p.H = q.size(1), p.Tq = q.size(2), p.D = q.size(3), p.Hkv = k.size(1), p.Tk = k.size(2);
  p.G = p.H / p.Hkv;
  p.bq = bq > 0 ? bq : kAttentionBlockQ;
  // Causal: square tiles, so the blocks that straddle the diagonal (computed whole, then
  // masked) hold as few masked pairs as the query tile allows.
  p.bk = bk > 0 ? bk : (causal ? p.bq : kAttentionBlockK);
  p.scale = scale;
  p.causal = causal;
  p.in = q.scalar_type();
  p.acc = p.in == at::kDouble ? at::kDouble : at::kFloat;
  p.gemm = p.in == at::kBFloat16 && resolved_bf16_matmul() == Bf16Matmul::Native ? at::kBFloat16 : p.acc;
  p.fp32_results = p.gemm == at::kBFloat16 && has_bf16_gemm_with_fp32_result();
  return p;
}

// t in `dtype` with t's sizes, contiguous (one copy at most). `fresh`: always a new tensor, never
// t itself (nor a view of it) — for a caller that modifies the result in place. (A permuted view
// with a size-1 dimension can be contiguous: then t would come back as is.)
at::Tensor packed(const at::Tensor& t, at::ScalarType dtype, bool fresh = false) {
  if (!fresh && t.scalar_type() == dtype && t.is_contiguous()) return t;
  return at::empty(t.sizes(), t.options().dtype(dtype)).copy_(t);
}

// [B, H, Tq, D] -> rows [B*Hkv, Tq*G, D] (see the layout above); `fresh` as in packed().
at::Tensor to_rows(const at::Tensor& x, const Plan& p, at::ScalarType dtype, bool fresh = false) {
  return packed(x.unflatten(1, {p.Hkv, p.G}).permute({0, 1, 3, 2, 4}), dtype, fresh)
      .view({p.B * p.Hkv, p.Tq * p.G, p.D});
}

// The packed q with the softmax scale folded in, in the gemm dtype: a new tensor (q itself is
// never scaled in place — autograd saved it).
at::Tensor scaled_rows(const at::Tensor& q, const Plan& p) {
  at::Tensor Q = to_rows(q, p, p.acc, /*fresh=*/true).mul_(p.scale);
  return p.gemm == p.acc ? Q : Q.to(p.gemm);
}

// rows [B*Hkv, Tq*G, D] -> a new [B, H, Tq, D] tensor in `dtype` (never a view: the caller may
// modify it in place).
at::Tensor from_rows(const at::Tensor& r, const Plan& p, at::ScalarType dtype) {
  at::Tensor out = at::empty({p.B, p.H, p.Tq, p.D}, r.options().dtype(dtype));
  out.view({p.B, p.Hkv, p.G, p.Tq, p.D}).copy_(r.view({p.B, p.Hkv, p.Tq, p.G, p.D}).permute({0, 1, 3, 2, 4}));
  return out;
}

// [B, Hkv, Tk, D] -> [B*Hkv, Tk, D].
at::Tensor to_keys(const at::Tensor& x, const Plan& p, at::ScalarType dtype) {
  return packed(x, dtype).view({p.B * p.Hkv, p.Tk, p.D});
}

// Which pairs of query positions i0 .. i0+nq-1 and keys j0 .. j0+nk-1 are kept.
struct BlockMask {
  enum Cover { None, Some, All } cover = All;
  at::Tensor keep;  // Some: [1 or B, 1 or nq, nk] bool
  // Some: the pairs to mask, laid out like a block's scores viewed as [B, Hkv, nq*G, nk]:
  // [1 or B, 1, 1 or nq*G, nk] (each query position's row repeated for its G heads), so the
  // masked_fill broadcasts over the batch and kv heads only.
  at::Tensor drop;
};

BlockMask block_mask(const Plan& p, int64_t i0, int64_t nq, int64_t j0, int64_t nk) {
  at::Tensor keep;
  auto combine = [&keep](const at::Tensor& m) { keep = keep.defined() ? keep.logical_and(m) : m; };
  if (p.causal) {
    // Query i0 + a sits at position Tk - Tq + i0 + a and sees block key b iff b - a <= diag.
    const int64_t diag = p.Tk - p.Tq + i0 - j0;
    if (diag + nq - 1 < 0) return {BlockMask::None, {}, {}};
    if (nk - 1 > diag) combine(at::ones({nq, nk}, at::kBool).tril(diag).view({1, nq, nk}));
  }
  if (p.key_padding.defined()) combine(p.key_padding.narrow(1, j0, nk).view({p.B, 1, nk}));
  if (p.query_segments.defined()) {
    combine(p.query_segments.narrow(1, i0, nq).view({p.B, nq, 1}).eq(p.key_segments.narrow(1, j0, nk).view({p.B, 1, nk})));
  }
  if (!keep.defined()) return {BlockMask::All, {}, {}};
  if (!keep.any().item<bool>()) return {BlockMask::None, {}, {}};
  if (keep.all().item<bool>()) return {BlockMask::All, {}, {}};
  const int64_t bm = keep.size(0), rows = keep.size(1);
  at::Tensor drop = keep.logical_not();
  drop = rows == 1 ? drop.view({bm, 1, 1, nk})
                   : drop.unsqueeze(2).expand({bm, rows, p.G, nk}).contiguous().view({bm, 1, rows * p.G, nk});
  return {BlockMask::Some, keep, drop};
}

// Scores of a block, [B*Hkv, nq*G, nk], as the product returns them (in the gemm dtype), masked
// entries at masked_score(). Every masked entry weighs exactly 0 after minus_rows and exp, as
// the plain formulation's lowest float does.
at::Tensor block_scores(const at::Tensor& qi, const at::Tensor& kj, const BlockMask& mask, const Plan& p) {
  at::Tensor s = at::bmm(qi, kj.transpose(1, 2));
  if (mask.cover == BlockMask::Some) {
    s.view({p.B, p.Hkv, s.size(1), s.size(2)}).masked_fill_(mask.drop, masked_score(s.scalar_type()));
  }
  return s;
}

// s - r per row (r: [B*Hkv, rows] in acc), in acc: in place when the scores are acc already,
// else in one pass that widens the bf16 scores exactly and subtracts in acc (the bits of a cast
// followed by the subtraction).
at::Tensor minus_rows(at::Tensor s, const at::Tensor& r, const Plan& p) {
  if (s.scalar_type() == p.acc) return s.sub_(r.unsqueeze(-1));
  return at::sub(s, r.unsqueeze(-1));
}

// Rows start .. start+len-1 of x [N, T, D]. libtorch's bf16 product (oneDNN) copies an operand
// that is neither contiguous nor a transposed contiguous matrix, so a narrowed bf16 tile would be
// copied at each of its uses: it is made contiguous once here, to the same values. The fp32 and
// fp64 products read the narrowed view as it is, so those tiles stay views (no copy of the input).
at::Tensor tile(const at::Tensor& x, int64_t start, int64_t len) {
  const at::Tensor view = x.narrow(1, start, len);
  return x.scalar_type() == at::kBFloat16 ? view.contiguous() : view;
}

// Tiles of `per` rows of x [N, T, D] along T (the last one shorter).
std::vector<at::Tensor> tiles(const at::Tensor& x, int64_t per) {
  std::vector<at::Tensor> out;
  for (int64_t start = 0; start < x.size(1); start += per) out.push_back(tile(x, start, std::min(per, x.size(1) - start)));
  return out;
}

// a in the dtype of the block products: rounded once, so that a block's probabilities or
// score gradients feed both of their products from one copy. A transposed use of the copy has
// the strides a cast of the transposed view would have, so the products see the same operands.
at::Tensor gemm_operand(const at::Tensor& a, const Plan& p) { return p.gemm == p.acc ? a : a.to(p.gemm); }

// into += a @ b (into: acc dtype, possibly a view; a, b in the gemm dtype). bf16 products add their
// fp32 result where the plan has fp32_results, else their result rounded to bf16.
void add_product(const at::Tensor& into, const at::Tensor& a, const at::Tensor& b, const Plan& p) {
  if (p.gemm == p.acc) {
    into.baddbmm_(a, b);
  } else if (p.fp32_results) {
    TORCH_CHECK(bmm_bf16_into_fp32(a, b, into, 1.0f), "blockwise attention: a tile layout the bf16 GEMM does not take");
  } else {
    into.add_(at::bmm(a, b));
  }
}

// a @ b in acc, a new tensor: from fp32 products, the fp32 result of the bf16 GEMM (fp32_results),
// or libtorch's bf16 result widened.
at::Tensor product_acc(const at::Tensor& a, const at::Tensor& b, const Plan& p) {
  if (p.gemm == p.acc) return at::bmm(a, b);
  if (p.fp32_results) {
    at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options().dtype(p.acc));
    TORCH_CHECK(bmm_bf16_into_fp32(a, b, out, 0.0f), "blockwise attention: a tile layout the bf16 GEMM does not take");
    return out;
  }
  return at::bmm(a, b).to(p.acc);
}

struct Forward {
  at::Tensor out;   // rows [B*Hkv, Tq*G, D], acc
  at::Tensor lse;   // [B*Hkv, Tq*G], acc; +inf for starved rows
  at::Tensor dead;  // [B, Tq] bool: starved rows; undefined when there are none
};

// Q rows (scaled), K, V [B*Hkv, Tk, D], all in the gemm dtype.
Forward forward_blocks(const at::Tensor& Q, const at::Tensor& K, const at::Tensor& V, const Plan& p) {
  const int64_t BH = p.B * p.Hkv, G = p.G;
  Forward f;
  f.out = at::empty({BH, p.Tq * G, p.D}, Q.options().dtype(p.acc));
  f.lse = at::empty({BH, p.Tq * G}, Q.options().dtype(p.acc));
  at::Tensor alive = p.may_starve() ? at::zeros({p.B, p.Tq}, at::kBool) : at::Tensor();
  const std::vector<at::Tensor> Kt = tiles(K, p.bk), Vt = tiles(V, p.bk);
  for (int64_t i0 = 0; i0 < p.Tq; i0 += p.bq) {
    const int64_t nq = std::min(p.bq, p.Tq - i0);
    const at::Tensor qi = tile(Q, i0 * G, nq * G);
    at::Tensor o, m, l;  // running output, row maximum, row sum
    for (int64_t j0 = 0; j0 < p.Tk; j0 += p.bk) {
      const int64_t nk = std::min(p.bk, p.Tk - j0);
      const BlockMask mask = block_mask(p, i0, nq, j0, nk);
      if (mask.cover == BlockMask::None) continue;
      if (alive.defined()) {
        at::Tensor rows = alive.narrow(1, i0, nq);
        if (mask.cover == BlockMask::All) {
          rows.fill_(true);
        } else {
          rows.logical_or_(mask.keep.any(-1));
        }
      }
      const at::Tensor raw = block_scores(qi, Kt[static_cast<size_t>(j0 / p.bk)], mask, p);
      const at::Tensor& vj = Vt[static_cast<size_t>(j0 / p.bk)];
      at::Tensor smax = raw.amax(-1);  // exact in the scores' dtype
      if (smax.scalar_type() != p.acc) smax = smax.to(p.acc);
      at::Tensor s;
      if (!m.defined()) {
        m = smax;
        s = minus_rows(raw, m, p).exp_();
        l = s.sum(-1);
        o = product_acc(gemm_operand(s, p), vj, p);
      } else {
        const at::Tensor m_new = at::maximum(m, smax);
        const at::Tensor alpha = (m - m_new).exp_();
        s = minus_rows(raw, m_new, p).exp_();
        l.mul_(alpha).add_(s.sum(-1));
        o.mul_(alpha.unsqueeze(-1));
        add_product(o, gemm_operand(s, p), vj, p);
        m = m_new;
      }
    }
    at::Tensor out_i = f.out.narrow(1, i0 * G, nq * G), lse_i = f.lse.narrow(1, i0 * G, nq * G);
    if (!m.defined()) {  // no key for any row of the block: all starved, set below
      out_i.zero_();
      lse_i.fill_(std::numeric_limits<double>::infinity());
      continue;
    }
    at::div_out(out_i, o, l.unsqueeze(-1));
    at::add_out(lse_i, m, l.log_());
  }
  if (alive.defined()) {
    at::Tensor dead = alive.logical_not();
    if (dead.any().item<bool>()) {
      // The plain formulation's value for a row whose keys are all masked: every score equal, so
      // the uniform average of all Tk values.
      const at::Tensor mean_v = V.to(p.acc).mean(1).view({p.B, p.Hkv, 1, 1, p.D});
      const at::Tensor out5 = f.out.view({p.B, p.Hkv, p.Tq, G, p.D});
      out5.copy_(at::where(dead.view({p.B, 1, p.Tq, 1, 1}), mean_v, out5));
      f.lse.view({p.B, p.Hkv, p.Tq, G}).masked_fill_(dead.view({p.B, 1, p.Tq, 1}), std::numeric_limits<double>::infinity());
      f.dead = dead;
    }
  }
  return f;
}

struct Grads {
  at::Tensor dq;      // rows [B*Hkv, Tq*G, D], acc
  at::Tensor dk, dv;  // [B, Hkv, Tk, D], acc
};

// dO rows in the gemm dtype, delta = rowsum(dO ∘ O) and lse in acc.
Grads backward_blocks(const at::Tensor& Q, const at::Tensor& K, const at::Tensor& V, const at::Tensor& dO,
                      const at::Tensor& delta, const at::Tensor& lse, const at::Tensor& dead, const at::Tensor& dO_acc,
                      const Plan& p) {
  const int64_t BH = p.B * p.Hkv, G = p.G;
  const auto opts = Q.options().dtype(p.acc);
  Grads g;
  g.dq = at::zeros({BH, p.Tq * G, p.D}, opts);
  g.dk = at::empty({p.B, p.Hkv, p.Tk, p.D}, opts);
  g.dv = at::empty({p.B, p.Hkv, p.Tk, p.D}, opts);
  const at::Tensor dk = g.dk.view({BH, p.Tk, p.D}), dv = g.dv.view({BH, p.Tk, p.D});
  const std::vector<at::Tensor> Qt = tiles(Q, p.bq * G), dOt = tiles(dO, p.bq * G);
  for (int64_t j0 = 0; j0 < p.Tk; j0 += p.bk) {
    const int64_t nk = std::min(p.bk, p.Tk - j0);
    const at::Tensor kj = tile(K, j0, nk), vj = tile(V, j0, nk);
    // dP = dO V^T feeds the difference dP - delta, which cancels: it is computed from the same
    // operands but never rounded to bf16 (FlashAttention keeps it in its fp32 accumulator too):
    // by the bf16 GEMM's fp32 result (fp32_results), else by the fp32 product of the widened operands.
    const at::Tensor vj_t = (p.gemm == p.acc || p.fp32_results ? vj : vj.to(p.acc)).transpose(1, 2);
    const at::Tensor dk_j = dk.narrow(1, j0, nk), dv_j = dv.narrow(1, j0, nk);
    dk_j.zero_();
    dv_j.zero_();
    for (int64_t i0 = 0; i0 < p.Tq; i0 += p.bq) {
      const int64_t nq = std::min(p.bq, p.Tq - i0);
      const BlockMask mask = block_mask(p, i0, nq, j0, nk);
      if (mask.cover == BlockMask::None) continue;
      const at::Tensor &qi = Qt[static_cast<size_t>(i0 / p.bq)], &dOi = dOt[static_cast<size_t>(i0 / p.bq)];
      const at::Tensor P = minus_rows(block_scores(qi, kj, mask, p), lse.narrow(1, i0 * G, nq * G), p).exp_();
      add_product(dv_j, gemm_operand(P, p).transpose(1, 2), dOi, p);
      at::Tensor dS = p.gemm == p.acc || p.fp32_results ? product_acc(dOi, vj_t, p)
                                                        : at::bmm(dO_acc.narrow(1, i0 * G, nq * G), vj_t);
      dS.sub_(delta.narrow(1, i0 * G, nq * G).unsqueeze(-1)).mul_(P);
      const at::Tensor dS_g = gemm_operand(dS, p);
      add_product(g.dq.narrow(1, i0 * G, nq * G), dS_g, kj, p);
      add_product(dk_j, dS_g.transpose(1, 2), qi, p);
    }
  }
  // S = (scale q) k^T with the scale folded into Q: dq = scale dS K, dk = dS^T (scale q).
  g.dq.mul_(p.scale);
  if (dead.defined()) {
    // Starved rows weigh every value 1/Tk (their P was 0 in the blocks).
    const at::Tensor rows = dO_acc.view({p.B, p.Hkv, p.Tq, G, p.D}) * dead.view({p.B, 1, p.Tq, 1, 1});
    g.dv.add_(rows.sum({2, 3}).div_(static_cast<double>(p.Tk)).unsqueeze(2));
  }
  return g;
}

Forward run_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Plan& p) {
  return forward_blocks(scaled_rows(q, p), to_keys(k, p, p.gemm), to_keys(v, p, p.gemm), p);
}

// Saves the plan's fields (the masks by reference, no copy) and rebuilds the plan in backward.
void save_plan(AutogradContext* ctx, const Plan& p) {
  ctx->saved_data["causal"] = p.causal;
  ctx->saved_data["scale"] = p.scale;
  ctx->saved_data["bq"] = p.bq;
  ctx->saved_data["bk"] = p.bk;
  if (p.key_padding.defined()) ctx->saved_data["key_padding"] = p.key_padding;
  if (p.query_segments.defined()) {
    ctx->saved_data["query_segments"] = p.query_segments;
    ctx->saved_data["key_segments"] = p.key_segments;
  }
}

Plan load_plan(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k) {
  auto& d = ctx->saved_data;
  Plan p = make_plan(q, k, d["causal"].toBool(), d["scale"].toDouble(), d["bq"].toInt(), d["bk"].toInt());
  if (d.count("key_padding") != 0) p.key_padding = d["key_padding"].toTensor();
  if (d.count("query_segments") != 0) {
    p.query_segments = d["query_segments"].toTensor();
    p.key_segments = d["key_segments"].toTensor();
  }
  return p;
}

struct BlockwiseAttention : torch::autograd::Function<BlockwiseAttention> {
  // `plan` travels as a pointer: autograd sees only q, k, v as inputs.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const Plan* plan) {
    RECORD_FUNCTION("zs::attention", std::vector<c10::IValue>());  // train/op_profile.h
    const Plan& p = *plan;
    Forward f = run_forward(q, k, v, p);
    at::Tensor out = from_rows(f.out, p, p.in);
    // The output is kept as its rows in the accumulation dtype (a tensor of our own), not as the
    // returned tensor: callers may modify that in place.
    ctx->save_for_backward({q, k, v});
    save_plan(ctx, p);
    ctx->saved_data["out_rows"] = f.out;
    ctx->saved_data["lse"] = f.lse;
    if (f.dead.defined()) ctx->saved_data["dead"] = f.dead;
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("zs::attention", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2];
    const Plan p = load_plan(ctx, q, k);
    const at::Tensor lse = ctx->saved_data["lse"].toTensor();
    const at::Tensor dead = ctx->saved_data.count("dead") != 0 ? ctx->saved_data["dead"].toTensor() : at::Tensor();
    const at::Tensor Q = scaled_rows(q, p);
    const at::Tensor dO_acc = to_rows(grads[0], p, p.acc);
    const at::Tensor delta = (dO_acc * ctx->saved_data["out_rows"].toTensor()).sum(-1);
    const at::Tensor dO = p.gemm == p.acc ? dO_acc : dO_acc.to(p.gemm);
    Grads g = backward_blocks(Q, to_keys(k, p, p.gemm), to_keys(v, p, p.gemm), dO, delta, lse, dead, dO_acc, p);
    return {from_rows(g.dq, p, p.in), g.dk.to(p.in), g.dv.to(p.in), at::Tensor()};
  }
};

}  // namespace

at::Tensor blockwise_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const AttentionOptions& o) {
  Plan p = make_plan(q, k, o.causal, o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(q.size(3))), o.block_q,
                     o.block_k);
  if (o.key_padding.defined()) p.key_padding = o.key_padding.to(at::kBool);
  if (o.query_segments.defined()) {
    p.query_segments = o.query_segments;
    p.key_segments = o.key_segments;
  }
  const bool grad = torch::autograd::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  if (!grad) {
    torch::autograd::AutoGradMode no_grad(false);
    return from_rows(run_forward(q, k, v, p).out, p, p.in);
  }
  return BlockwiseAttention::apply(q, k, v, &p)[0];
}

}  // namespace zeroshard::nn
