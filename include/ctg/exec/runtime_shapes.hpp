#pragma once
// Run-time shapes: every node's static dims with the fed sizes filled in,
// checked as they are computed. Shared by every backend.
#include <string>

#include <ctg/core/dims_text.hpp>
#include <ctg/core/error.hpp>
#include <ctg/graph/step.hpp>

namespace ctg::detail {

inline dim_t checked_numel(const rt_shape& s, const char* what) {
  dim_t n = 1;
  for (std::size_t i = 0; i < s.rank; ++i) {
    if (s.d[i] < 0) throw error(std::string("ctg: negative size in ") + what + " dims " + dims_text(s));
    if (__builtin_mul_overflow(n, s.d[i], &n))
      throw error(std::string("ctg: size overflows in ") + what + ": dims " + dims_text(s));
  }
  return n;
}

// numpy broadcast of two run-time shapes; a dyn dim never stretches.
inline rt_shape broadcast_rt(const rt_shape& a, const rt_shape& b, const char* where) {
  rt_shape r;
  r.rank = a.rank > b.rank ? a.rank : b.rank;
  for (std::size_t i = 0; i < r.rank; ++i) {
    const dim_t da = i < a.rank ? a.d[a.rank - 1 - i] : 1, db = i < b.rank ? b.d[b.rank - 1 - i] : 1;
    dim_t& out = r.d[r.rank - 1 - i];
    if (da == db || db == 1) out = da;
    else if (da == 1) out = db;
    else
      throw error(std::string("ctg: shape mismatch at run time in ") + where + ": " + dims_text(a) + " vs " +
                  dims_text(b));
  }
  return r;
}

template <class S>
rt_shape static_rt() {
  rt_shape r;
  r.rank = S::rank;
  for (std::size_t i = 0; i < S::rank; ++i) r.d[i] = S::dims[i];
  return r;
}

// Fill the ctg::dyn dims of static shape S from `from` (a shape S stretches to, right-aligned).
template <class S>
rt_shape fill_dyn(const rt_shape& from) {
  rt_shape r = static_rt<S>();
  for (std::size_t i = 0; i < S::rank; ++i)
    if (r.d[i] == dyn) r.d[i] = from.d[from.rank - S::rank + i];
  return r;
}

// Compute the run-time shape of node I of step Key (graph/step.hpp) from the shapes before it.
template <class Key, std::size_t I>
void resolve_shape(rt_shape* shapes) {
  using Nodes = typename step_of<Key>::nodes;
  using N = tl::at_t<I, Nodes>;
  rt_shape& out = shapes[I];
  if constexpr (N::kind == node_kind::leaf) {
    if constexpr (!N::fed) out = static_rt<typename N::dims>();
    // inputs were filled from their feeds
  } else if constexpr (N::kind == node_kind::quantize || N::kind == node_kind::dequantize) {
    out = shapes[tl::index_of_v<tl::at_t<0, typename N::children>, Nodes>];
  } else if constexpr (N::kind == node_kind::fp8_matmul) {
    rt_shape a = shapes[tl::index_of_v<tl::at_t<0, typename N::children>, Nodes>];
    rt_shape b = shapes[tl::index_of_v<tl::at_t<1, typename N::children>, Nodes>];
    auto swap_last = [](rt_shape& s) {
      const dim_t t = s.d[s.rank - 1];
      s.d[s.rank - 1] = s.d[s.rank - 2];
      s.d[s.rank - 2] = t;
    };
    if (N::transpose_a) swap_last(a);
    if (N::transpose_b) swap_last(b);
    if (a.d[a.rank - 1] != b.d[b.rank - 2])
      throw error("ctg: shape mismatch at run time in fp8_matmul: " + dims_text(a) + " @ " + dims_text(b));
    rt_shape ba = a, bb = b;
    ba.rank -= 2;
    bb.rank -= 2;
    out = broadcast_rt(ba, bb, "fp8_matmul batch dims");
    out.d[out.rank++] = a.d[a.rank - 2];
    out.d[out.rank++] = b.d[b.rank - 1];
  } else if constexpr (N::kind == node_kind::random) {
    out = shapes[tl::index_of_v<tl::at_t<0, typename N::children>, Nodes>];
  } else if constexpr (N::kind == node_kind::constant || N::kind == node_kind::runtime_scalar) {
    out = rt_shape{};
  } else if constexpr (N::kind == node_kind::elementwise) {
    using Op = typename N::op;
    if constexpr (requires { typename Op::like; }) {
      if constexpr (std::is_void_v<typename Op::like>) out = static_rt<typename N::dims>();
      else out = shapes[tl::index_of_v<typename Op::like, Nodes>];
    } else if constexpr (requires { typename Op::result_shape; }) {
      // e.g. one_hot: the op's own shape, its dyn dims those of its child
      out = fill_dyn<typename N::dims>(shapes[tl::index_of_v<tl::at_t<0, typename N::children>, Nodes>]);
    } else {
      // Each dim is set by the children whose static dim there is not 1; a
      // static 1 (or a missing dim) stretches, anything else must agree.
      using S = typename N::dims;
      out = static_rt<S>();
      for (std::size_t i = 0; i < S::rank; ++i) out.d[i] = 1;
      // (over child positions, not child types: see step_key)
      auto merge = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
        using C = tl::at_t<K, typename N::children>;
        const rt_shape& c = shapes[tl::index_of_v<C, Nodes>];
        for (std::size_t i = 0; i < C::dims::rank; ++i) {
          if (C::dims::dims[i] == 1) continue;
          dim_t& o = out.d[S::rank - C::dims::rank + i];
          if (o == 1) o = c.d[i];
          else if (o != c.d[i])
            throw error("ctg: shape mismatch at run time in an elementwise op: dim " + std::to_string(c.d[i]) +
                        " vs " + std::to_string(o) + " (a ctg::dyn dim never broadcasts)");
        }
      };
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        (merge(std::integral_constant<std::size_t, K>{}), ...);
      }(std::make_index_sequence<N::children::size>{});
    }
  } else if constexpr (N::kind == node_kind::reduce) {
    out = fill_dyn<typename N::dims>(shapes[tl::index_of_v<tl::at_t<0, typename N::children>, Nodes>]);
  } else if constexpr (N::kind == node_kind::view && requires { N::part; }) {
    // a part of a stack's gradient: the stack input's shape, or a stacked leaf's
    if constexpr (N::part == 0) out = shapes[tl::index_of_v<tl::at_t<0, typename N::children>, Nodes>];
    else out = static_rt<typename N::dims>();
  } else if constexpr (N::kind == node_kind::stack || N::kind == node_kind::stack_grad) {
    out = shapes[tl::index_of_v<tl::at_t<0, typename N::children>, Nodes>];
  } else if constexpr (N::kind == node_kind::view) {
    using X = tl::at_t<0, typename N::children>;
    const rt_shape& x = shapes[tl::index_of_v<X, Nodes>];
    out = static_rt<typename N::dims>();
    std::size_t from = 0;
    for (std::size_t i = 0; i < out.rank; ++i) {
      if (out.d[i] != dyn) continue;
      while (X::dims::dims[from] != dyn) ++from;
      out.d[i] = x.d[from++];
    }
    if (out.numel() != x.numel())
      throw error("ctg: shape mismatch at run time in reshape: " + dims_text(x) + " to " + dims_text(out));
  } else if constexpr (N::kind == node_kind::gather) {
    const rt_shape& t = shapes[tl::index_of_v<tl::at_t<0, typename N::children>, Nodes>];
    out = shapes[tl::index_of_v<tl::at_t<1, typename N::children>, Nodes>];
    for (std::size_t i = 1; i < t.rank; ++i) out.d[out.rank++] = t.d[i];
  } else if constexpr (N::kind == node_kind::scatter_add) {
    out = static_rt<typename N::dims>();
  } else if constexpr (N::kind == node_kind::transpose) {
    out = shapes[tl::index_of_v<tl::at_t<0, typename N::children>, Nodes>];
    const dim_t t = out.d[out.rank - 1];
    out.d[out.rank - 1] = out.d[out.rank - 2];
    out.d[out.rank - 2] = t;
  } else {
    static_assert(N::kind == node_kind::matmul);
    const rt_shape& a = shapes[tl::index_of_v<tl::at_t<0, typename N::children>, Nodes>];
    const rt_shape& b = shapes[tl::index_of_v<tl::at_t<1, typename N::children>, Nodes>];
    if (a.d[a.rank - 1] != b.d[b.rank - 2])
      throw error("ctg: shape mismatch at run time in matmul: " + dims_text(a) + " @ " + dims_text(b));
    rt_shape ba = a, bb = b;
    ba.rank -= 2;
    bb.rank -= 2;
    out = broadcast_rt(ba, bb, "matmul batch dims");
    out.d[out.rank++] = a.d[a.rank - 2];
    out.d[out.rank++] = b.d[b.rank - 1];
  }
}

}  // namespace ctg::detail
