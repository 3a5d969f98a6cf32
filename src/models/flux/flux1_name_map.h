// FLUX.1 transformer: BFL's original names (flux1-*.safetensors, what Flux1DiT is built with)
// <-> diffusers' FluxTransformer2DModel names (the -diffusers repackaging, transformer/*.safetensors).
#pragma once

#include "models/flux/flux1_dit.h"
#include "nn/name_map.h"

namespace zeroshard::models::flux {

// The map for the model `c` describes (the fused single-block linear1 splits by its sizes):
//   img_in / txt_in                     x_embedder / context_embedder
//   time_in, vector_in, guidance_in     time_text_embed.{timestep,text,guidance}_embedder.linear_{1,2}
//   double_blocks.N                     transformer_blocks.N:
//     img_mod.lin / txt_mod.lin           norm1.linear / norm1_context.linear
//     img_attn.qkv = [q | k | v]          attn.to_q, to_k, to_v          (concat of theirs)
//     txt_attn.qkv                        attn.add_q_proj, add_k_proj, add_v_proj
//     img_attn.norm.{query,key}_norm.scale  attn.norm_q / norm_k .weight
//     txt_attn.norm.{query,key}_norm.scale  attn.norm_added_q / norm_added_k .weight
//     img_attn.proj / txt_attn.proj       attn.to_out.0 / attn.to_add_out
//     img_mlp.{0,2} / txt_mlp.{0,2}       ff.net.0.proj, ff.net.2 / ff_context.net.0.proj, ff_context.net.2
//   single_blocks.N                     single_transformer_blocks.N:
//     linear1 = [q | k | v | mlp_in]      attn.to_q, to_k, to_v, proj_mlp (rows D, D, D, mlp_hidden)
//     linear2                             proj_out
//     norm.{query,key}_norm.scale         attn.norm_q / norm_k .weight
//     modulation.lin                      norm.linear
//   final_layer.linear                  proj_out
//   final_layer.adaLN_modulation.1      norm_out.linear with its two halves swapped: BFL's
//                                       (shift, scale) is diffusers' (scale, shift)
nn::NameMap flux1_diffusers_name_map(const Flux1Config& c);

}  // namespace zeroshard::models::flux
