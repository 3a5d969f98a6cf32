// Name maps between two checkpoint layouts of the same weights — a model's own names ("ours",
// e.g. Wan's original release) and another release's ("theirs", e.g. the -Diffusers
// repackaging) — so one model loads either file and exports to either.
//
// Rules, tried in the order they were added (the first whose pattern matches wins); a name no
// rule matches is the same on both sides:
//   rename(ours, theirs)                 same tensor, another name
//   reshape(ours, theirs, to_theirs, to_ours)  same elements in the same row-major order,
//                                        another shape (e.g. a 1x1 conv [O, I, 1, 1] <-> a
//                                        linear [O, I])
//   concat(ours, {theirs...}, rows)      our tensor is their pieces concatenated along dim 0
//                                        (our fused qkv <- their to_q, to_k, to_v)
//   split({ours...}, theirs, rows)       their tensor is our pieces concatenated along dim 0
//                                        (our to_q, to_k, to_v <- their fused qkv)
//   `rows` gives the pieces' dim-0 sizes from the fused tensor's shape, for cutting a whole
//   fused tensor (export, to_ours); empty: equal pieces. Reading through the ParamSource needs
//   no `rows`: the file's and the model's shapes say where each piece lies.
//   swap_halves(ours, theirs)            our tensor is theirs with its two dim-0 halves swapped
//                                        (FLUX.1's final (shift, scale) vs diffusers' (scale, shift))
//   ignore(theirs, why)                  their tensors the model does not have, left unread on
//                                        purpose (Qwen2.5-VL's vision tower beside the text tower
//                                        a pipeline runs); `why` says so wherever they are counted
// Every rule but ignore has its exact inverse: to_ours(to_theirs(x)) == x bitwise.
//
// Patterns are full names where `*` matches one dot-free component ("blocks.*.attn1") and `**`
// one or more components of any kind ("blocks.*.norm3.**" covers .weight and .bias); the
// wildcards captured on one side are substituted, in order, into the other side's pattern, so
// every pattern of a rule must hold the same wildcards in the same order.
//
// All these operations keep each output element's row-major position a contiguous range of one
// input tensor, which is what lets name_mapped_param_source serve a rank only the byte ranges
// of its shards.
#pragma once

#include "zeroshard/shard.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::nn {

using ShapeFn = std::function<std::vector<int64_t>(const std::vector<int64_t>&)>;
// Fused shape -> the dim-0 size of each piece.
using RowsFn = std::function<std::vector<int64_t>(const std::vector<int64_t>&)>;

class NameMap {
 public:
  enum class Kind { Rename, Concat, Split, SwapHalves, Ignore };
  struct Rule {
    Kind kind = Kind::Rename;
    std::vector<std::string> ours, theirs;  // patterns; several only on the fused side; ignore: none of ours
    ShapeFn to_theirs, to_ours;             // reshape rules only (empty: same shape)
    RowsFn rows;                            // concat / split (empty: equal pieces)
    std::string why;                        // ignore rules only
  };

  NameMap& rename(const std::string& ours, const std::string& theirs);
  NameMap& reshape(const std::string& ours, const std::string& theirs, ShapeFn to_theirs, ShapeFn to_ours);
  NameMap& concat(const std::string& ours, const std::vector<std::string>& theirs, RowsFn rows = {});
  NameMap& split(const std::vector<std::string>& ours, const std::string& theirs, RowsFn rows = {});
  NameMap& swap_halves(const std::string& ours, const std::string& theirs);
  NameMap& ignore(const std::string& theirs, const std::string& why);
  // Appends a rule of another map (to combine a series' own rules with a shared map's).
  NameMap& add(const Rule& rule);
  const std::vector<Rule>& rules() const { return rules_; }

  // Where a tensor of one side lies on the other side.
  struct Resolved {
    const Rule* rule = nullptr;         // null: the same name and shape; an ignore rule: nowhere
    std::vector<std::string> other;     // its name on the other side, or the pieces it is cut
                                        // into / concatenated from there, in order
    std::vector<std::string> siblings;  // when it is one piece of a tensor fused on the other
                                        // side: all the pieces (this side's names), in order
    size_t piece = 0;                   // and which of them it is
  };
  Resolved resolve_ours(const std::string& name) const;
  Resolved resolve_theirs(const std::string& name) const;

  // The 1:1 name on their side (identity, rename, reshape, swap_halves); throws for a name that
  // is part of a concat or split rule (it has no single counterpart).
  std::string their_name(const std::string& ours) const;
  std::string our_name(const std::string& theirs) const;

  // Whole-tensor conversion (export, tests). Throws naming the tensor when a piece of a
  // concat/split group is missing, a shape does not fit the rule, or two names collide.
  // to_ours drops their ignored tensors.
  std::map<std::string, at::Tensor> to_theirs(const std::map<std::string, at::Tensor>& ours) const;
  std::map<std::string, at::Tensor> to_ours(const std::map<std::string, at::Tensor>& theirs) const;

 private:
  std::vector<Rule> rules_;
};

// A ParamSource serving our parameters from a safetensors file (or a `*.safetensors.index.json`)
// written under their names: each read touches only the element ranges of their tensors that
// the requested range of our parameter comes from (for a split, the rows of our piece inside
// the fused tensor; for a concat, the pieces the range overlaps). check() requires that every
// parameter is found with a fitting shape and that the file holds nothing else but what the
// map's ignore rules name (notes() counts those, per rule, with the rule's reason); read()
// needs check() first (a split piece's offset depends on its siblings' shapes). `path`: what
// io::SafetensorsSet opens (a file, an index, a folder).
std::shared_ptr<ParamSource> name_mapped_param_source(const std::string& path, NameMap map);

}  // namespace zeroshard::nn
