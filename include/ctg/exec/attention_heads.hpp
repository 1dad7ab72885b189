#pragma once
// Where fused attention's operands lie (graph/attention.hpp), for every
// backend: q's run-time shape is heads of [T, Dh] (token_rows) or [Dh, T]
// (feature_rows), one after another; element (t, d) of head h is at
// h * T * Dh + t * token_stride + d * feature_stride. lse and delta hold T
// values a head, one after another.
#include <ctg/core/math.hpp>
#include <ctg/core/shape.hpp>
#include <ctg/graph/attention.hpp>

namespace ctg::detail {

struct attention_heads {
  dim_t heads = 0, tokens = 0, features = 0;
  dim_t token_stride = 0, feature_stride = 0;

  CTG_HD constexpr dim_t head_elements() const { return tokens * features; }
  // The scores' scale 1 / sqrt(Dh), in C (the same on every backend: IEEE sqrt and division).
  template <class C>
  CTG_HD C scale() const {
    return static_cast<C>(1.0 / math::sqrt(static_cast<double>(features)));
  }
  CTG_HD constexpr dim_t at(dim_t t, dim_t d) const { return t * token_stride + d * feature_stride; }
};

constexpr attention_heads attention_heads_of(const rt_shape& q, attention_layout layout) {
  attention_heads h;
  const dim_t a = q.d[q.rank - 2], b = q.d[q.rank - 1];
  const bool token_rows = layout == attention_layout::token_rows;
  h.tokens = token_rows ? a : b;
  h.features = token_rows ? b : a;
  h.token_stride = token_rows ? h.features : 1;
  h.feature_stride = token_rows ? 1 : h.tokens;
  h.heads = h.tokens * h.features > 0 ? q.numel() / (h.tokens * h.features) : 0;
  return h;
}

}  // namespace ctg::detail
