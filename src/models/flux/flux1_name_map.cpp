#include "models/flux/flux1_name_map.h"

#include <string>

namespace zeroshard::models::flux {

nn::NameMap flux1_diffusers_name_map(const Flux1Config& c) {
  nn::NameMap m;
  m.rename("img_in.**", "x_embedder.**");
  m.rename("txt_in.**", "context_embedder.**");
  const std::pair<std::string, std::string> embedders[] = {
      {"time_in", "timestep_embedder"}, {"vector_in", "text_embedder"}, {"guidance_in", "guidance_embedder"}};
  for (const auto& [ours, theirs] : embedders) {
    m.rename(ours + ".in_layer.**", "time_text_embed." + theirs + ".linear_1.**");
    m.rename(ours + ".out_layer.**", "time_text_embed." + theirs + ".linear_2.**");
  }
  const std::string d = "double_blocks.*.", td = "transformer_blocks.*.";
  m.rename(d + "img_mod.lin.**", td + "norm1.linear.**");
  m.rename(d + "txt_mod.lin.**", td + "norm1_context.linear.**");
  m.concat(d + "img_attn.qkv.**", {td + "attn.to_q.**", td + "attn.to_k.**", td + "attn.to_v.**"});
  m.concat(d + "txt_attn.qkv.**", {td + "attn.add_q_proj.**", td + "attn.add_k_proj.**", td + "attn.add_v_proj.**"});
  m.rename(d + "img_attn.norm.query_norm.scale", td + "attn.norm_q.weight");
  m.rename(d + "img_attn.norm.key_norm.scale", td + "attn.norm_k.weight");
  m.rename(d + "txt_attn.norm.query_norm.scale", td + "attn.norm_added_q.weight");
  m.rename(d + "txt_attn.norm.key_norm.scale", td + "attn.norm_added_k.weight");
  m.rename(d + "img_attn.proj.**", td + "attn.to_out.0.**");
  m.rename(d + "txt_attn.proj.**", td + "attn.to_add_out.**");
  m.rename(d + "img_mlp.0.**", td + "ff.net.0.proj.**");
  m.rename(d + "img_mlp.2.**", td + "ff.net.2.**");
  m.rename(d + "txt_mlp.0.**", td + "ff_context.net.0.proj.**");
  m.rename(d + "txt_mlp.2.**", td + "ff_context.net.2.**");
  const std::string s = "single_blocks.*.", ts = "single_transformer_blocks.*.";
  const int64_t hidden = c.hidden_size, mlp = c.mlp_hidden();
  m.concat(s + "linear1.**", {ts + "attn.to_q.**", ts + "attn.to_k.**", ts + "attn.to_v.**", ts + "proj_mlp.**"},
           [hidden, mlp](const std::vector<int64_t>&) { return std::vector<int64_t>{hidden, hidden, hidden, mlp}; });
  m.rename(s + "linear2.**", ts + "proj_out.**");
  m.rename(s + "norm.query_norm.scale", ts + "attn.norm_q.weight");
  m.rename(s + "norm.key_norm.scale", ts + "attn.norm_k.weight");
  m.rename(s + "modulation.lin.**", ts + "norm.linear.**");
  m.rename("final_layer.linear.**", "proj_out.**");
  m.swap_halves("final_layer.adaLN_modulation.1.**", "norm_out.linear.**");
  return m;
}

}  // namespace zeroshard::models::flux
