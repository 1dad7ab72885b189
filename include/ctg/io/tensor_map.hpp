#pragma once
// Which file tensor holds each of ctg's leaves, and in what layout: the
// bridge between PyTorch / Hugging Face names and layouts and ctg's.
//
//   ctg::io::tensor_map m;
//   m.add("mlp.up.weight", "mlp.up.weight", ctg::io::torch_linear)    // nn.Linear [out, in] <-> ctg [in, out]
//    .add("layers.{i}.ln1.scale", "layers.{i}.ln1.weight")            // a rename; one tensor per layer
//    .add("layers.{i}.attn.wq", "layers.{i}.attn.wqkv.weight",        // q, k, v fused in one nn.Linear
//         ctg::io::fused(ctg::io::as_is, 0, 3));
//
// A leaf without an entry is the file tensor of the same name, as_is, whole
// (what save_safetensors writes with an empty map). After weights_only(), a
// state leaf without an entry (an FP8 scale or amax history, which a
// PyTorch model does not have) is in no file tensor: save skips it, and
// load sets it to its initial value (scale 1, history 0), as a fresh store
// holds it: the store's were taken from the weights the load replaces. When a leaf's name
// contains "{i}" (a stacked leaf of ctg::nn::stack: leading dim = layers) and
// its tensor name does too, slice k of the leaf is the tensor named with
// "{i}" replaced by k; otherwise the whole leaf is one tensor.
//
// Layouts, for a ctg slice of dims s (the file tensor's dims follow from s):
//   as_is            file dims = s, same element order.
//   torch_linear     s = [in, out]; file [out, in] (nn.Linear's weight): transposed.
//   torch_heads_in   s = [H, d, Dh] (per-head input weights); file [H*Dh, d], the
//                    weight of nn.Linear(d, H*Dh) whose output splits as
//                    .view(..., H, Dh): ctg[h][i][j] = file[h*Dh + j][i].
//   torch_heads_out  s = [H, Dh, d] (per-head output weights); file [d, H*Dh], the weight
//                    of nn.Linear(H*Dh, d): ctg[h][j][i] = file[i][h*Dh + j].
//   fused(l, p, n)   the p-th of n equal blocks along the file tensor's dim 0
//                    (q, k, v in one nn.Linear(d, 3*H*Dh): parts 0, 1, 2); the
//                    file tensor's dim 0 is n times l's.
// Element bytes are copied unchanged (no dtype conversion).
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ctg/core/error.hpp>
#include <ctg/core/shape.hpp>

namespace ctg::io {

struct layout {
  enum kind_t : std::uint8_t { as_is, linear, heads_in, heads_out };
  kind_t kind = as_is;
  dim_t part = 0, parts = 1;
};

inline constexpr layout as_is{layout::as_is};
inline constexpr layout torch_linear{layout::linear};
inline constexpr layout torch_heads_in{layout::heads_in};
inline constexpr layout torch_heads_out{layout::heads_out};
constexpr layout fused(layout l, dim_t part, dim_t parts) { return {l.kind, part, parts}; }

class tensor_map {
 public:
  struct entry {
    std::string leaf, tensor;
    layout how;
  };
  tensor_map& add(std::string leaf, std::string tensor, layout how = as_is) {
    for (const auto& e : entries_)
      if (e.leaf == leaf) throw error("ctg: tensor_map: leaf '" + leaf + "' is mapped twice");
    if (how.parts < 1 || how.part < 0 || how.part >= how.parts)
      throw error("ctg: tensor_map: leaf '" + leaf + "': expected a part in [0, " + std::to_string(how.parts) +
                  "), found " + std::to_string(how.part));
    entries_.push_back({std::move(leaf), std::move(tensor), how});
    return *this;
  }
  // The leaf's entry, or nullptr (then: the tensor of the same name, as_is).
  const entry* find(std::string_view leaf) const {
    for (const auto& e : entries_)
      if (e.leaf == leaf) return &e;
    return nullptr;
  }
  const std::vector<entry>& entries() const { return entries_; }

  // State leaves without an entry are left out of the file (see above).
  tensor_map& weights_only() {
    weights_only_ = true;
    return *this;
  }
  bool skips_state() const { return weights_only_; }

 private:
  std::vector<entry> entries_;
  bool weights_only_ = false;
};

}  // namespace ctg::io

namespace ctg::detail {
using io::as_is;
using io::layout;
using io::tensor_map;
// "torch_heads_in", or "torch_heads_in, part 1 of 3" for a fused one.
inline std::string layout_text(const layout& l) {
  constexpr const char* names[] = {"as_is", "torch_linear", "torch_heads_in", "torch_heads_out"};
  return names[l.kind] + (l.parts > 1 ? ", part " + std::to_string(l.part) + " of " + std::to_string(l.parts) : "");
}

// The file tensor's dims for a ctg slice of dims s; `what` names the leaf in the message.
inline rt_shape file_shape(const layout& l, const rt_shape& s, const std::string& what) {
  constexpr std::size_t ranks[] = {0, 2, 3, 3};
  if (l.kind != layout::as_is ? s.rank != ranks[l.kind] : (l.parts > 1 && s.rank == 0))
    throw error("ctg: tensor_map: " + what + ": layout " + layout_text(l) + " does not fit its rank " + std::to_string(s.rank) + " (expected " +
                (l.kind != layout::as_is ? std::to_string(ranks[l.kind]) : std::string("rank >= 1")) + ")");
  rt_shape f = s;
  switch (l.kind) {
    case layout::as_is: break;
    case layout::linear: f.d[0] = s.d[1], f.d[1] = s.d[0]; break;
    case layout::heads_in: f.rank = 2, f.d[0] = s.d[0] * s.d[2], f.d[1] = s.d[1]; break;
    case layout::heads_out: f.rank = 2, f.d[0] = s.d[2], f.d[1] = s.d[0] * s.d[1]; break;
  }
  f.d[0] *= l.parts;
  return f;
}

// One element between ctg (native byte order) and the file (little-endian).
inline void move_element(std::byte* dst, const std::byte* src, std::size_t es) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(dst, src, es);
  } else {
    for (std::size_t b = 0; b < es; ++b) dst[b] = src[es - 1 - b];
  }
}

// Copies a ctg slice of dims s from its file tensor (to_ctg) or into it, element size es.
inline void layout_copy(const layout& l, const rt_shape& s, std::byte* ctg, std::byte* file, std::size_t es,
                        bool to_ctg) {
  const std::size_t n = static_cast<std::size_t>(s.numel());
  file += static_cast<std::size_t>(l.part) * n * es;  // this part's block
  auto one = [&](std::size_t c, std::size_t f) {
    if (to_ctg) move_element(ctg + c * es, file + f * es, es);
    else move_element(file + f * es, ctg + c * es, es);
  };
  const auto d = [&](std::size_t i) { return static_cast<std::size_t>(s.d[i]); };
  std::size_t c = 0;
  switch (l.kind) {
    case layout::as_is:
      for (; c < n; ++c) one(c, c);
      break;
    case layout::linear:  // ctg (i, o) <- file (o, i)
      for (std::size_t i = 0; i < d(0); ++i)
        for (std::size_t o = 0; o < d(1); ++o) one(c++, o * d(0) + i);
      break;
    case layout::heads_in:  // ctg (h, i, j) <- file (h*Dh + j, i)
      for (std::size_t h = 0; h < d(0); ++h)
        for (std::size_t i = 0; i < d(1); ++i)
          for (std::size_t j = 0; j < d(2); ++j) one(c++, (h * d(2) + j) * d(1) + i);
      break;
    case layout::heads_out:  // ctg (h, j, i) <- file (i, h*Dh + j)
      for (std::size_t h = 0; h < d(0); ++h)
        for (std::size_t j = 0; j < d(1); ++j)
          for (std::size_t i = 0; i < d(2); ++i) one(c++, i * (d(0) * d(1)) + h * d(1) + j);
      break;
  }
}
}  // namespace ctg::detail

namespace ctg::io {

}  // namespace ctg::io
