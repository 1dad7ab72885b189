#pragma once
// The tensor_map for ctg::nn::transformer and its PyTorch twin written the
// usual way (examples/from_torch.py has it): nn.Embedding `tok` and `pos`, a
// ModuleList `layers` of blocks with an RMSNorm `ln1` (parameter `weight`),
// attention `attn` with bias-free nn.Linear projections, an RMSNorm `ln2`, a
// SwiGLU `mlp` with bias-free nn.Linear `w1`, `w3` (dim -> hidden) and `w2`
// (hidden -> dim), then an RMSNorm `ln_f` and a bias-free nn.Linear `lm_head`.
//
//   ctg::io::load_safetensors(path, store, ctg::io::torch_transformer_map());
//   ctg::io::torch_transformer_map(ctg::io::qkv::fused)   // attention as one attn.wqkv = nn.Linear(dim, 3*H*Dh)
//
// state_dict name (PyTorch shape)                  ctg leaf (shape)
//   tok.weight [vocab, dim]                          tok.weight [vocab, dim]
//   pos.weight [max_seq, dim]                        pos.weight [max_seq, dim]
//   layers.{k}.ln1.weight [dim]                      layers.{i}.ln1.scale [L, dim]
//   layers.{k}.attn.wq.weight [H*Dh, dim]            layers.{i}.attn.wq [L, H*Dh, dim]    (wk, wv alike)
//     or layers.{k}.attn.wqkv.weight [3*H*Dh, dim]     (q, k, v: rows 0, 1, 2 x H*Dh)
//   layers.{k}.attn.wo.weight [dim, H*Dh]            layers.{i}.attn.wo [L, H*Dh, dim]
//   layers.{k}.ln2.weight [dim]                      layers.{i}.ln2.scale [L, dim]
//   layers.{k}.mlp.w1.weight [hidden, dim]           layers.{i}.mlp.w1 [L, dim, hidden]   (w3 alike)
//   layers.{k}.mlp.w2.weight [dim, hidden]           layers.{i}.mlp.w2 [L, hidden, dim]
//   ln_f.weight [dim]                                ln_f.scale [dim]
//   lm_head.weight [vocab, dim]                      lm_head.weight [dim, vocab]
// A model's FP8 scaling state leaves (which the PyTorch twin does not have)
// are in no tensor: weights_only(), so a load starts them afresh.
#include <string>

#include <ctg/io/tensor_map.hpp>

namespace ctg::io {

enum class qkv { separate, fused };

inline tensor_map torch_transformer_map(qkv attention = qkv::separate) {
  tensor_map m;
  m.add("tok.weight", "tok.weight").add("pos.weight", "pos.weight");
  m.add("layers.{i}.ln1.scale", "layers.{i}.ln1.weight").add("layers.{i}.ln2.scale", "layers.{i}.ln2.weight");
  const char* qkv_leaves[] = {"layers.{i}.attn.wq", "layers.{i}.attn.wk", "layers.{i}.attn.wv"};
  for (int p = 0; p < 3; ++p) {
    if (attention == qkv::fused) m.add(qkv_leaves[p], "layers.{i}.attn.wqkv.weight", fused(as_is, p, 3));
    else m.add(qkv_leaves[p], std::string(qkv_leaves[p]) + ".weight");  // nn.Linear's [out, in], as ctg's
  }
  m.add("layers.{i}.attn.wo", "layers.{i}.attn.wo.weight", torch_linear);
  for (const char* w : {"layers.{i}.mlp.w1", "layers.{i}.mlp.w2", "layers.{i}.mlp.w3"})
    m.add(w, std::string(w) + ".weight", torch_linear);
  m.add("ln_f.scale", "ln_f.weight").add("lm_head.weight", "lm_head.weight", torch_linear);
  return m.weights_only();  // (the PyTorch twin has no FP8 scaling state)
}

}  // namespace ctg::io
