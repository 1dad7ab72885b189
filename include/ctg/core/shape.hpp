#pragma once
// Static shapes. A shape is a list of dims; ctg::dyn marks a dim known only at
// run time. Broadcasting is numpy-style over trailing dims, with one rule that
// keeps the graph's structure static: a dynamic dim never broadcasts (it must
// equal the other side at run time), only a static 1 does.
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace ctg {

using dim_t = std::int64_t;
inline constexpr dim_t dyn = -1;
inline constexpr std::size_t max_rank = 6;

// The most elements a tensor's static dims may hold: 2^56, so that their
// bytes (8 at most each) and a few layers of them fit a 64-bit size.
inline constexpr std::uint64_t max_static_elements = std::uint64_t{1} << 56;

template <dim_t... Dims>
struct shape {
  static constexpr std::size_t rank = sizeof...(Dims);
  static constexpr std::array<dim_t, rank> dims{Dims...};
  static constexpr bool is_static = ((Dims != dyn) && ...);
  // The element count of a static shape (0 when some dim is ctg::dyn).
  static constexpr std::size_t static_numel = is_static ? (std::size_t(1) * ... * static_cast<std::size_t>(Dims)) : 0;
  static_assert(rank <= max_rank, "ctg: tensors have at most 6 dims");
  static_assert(((Dims == dyn || Dims >= 1) && ...), "ctg: a static dim must be >= 1 (use ctg::dyn for run-time dims)");
  static_assert([] {
    std::uint64_t n = 1;  // (the static dims' product, checked as it grows: it wrapped silently)
    for (const dim_t d : dims) {
      if (d < 1) continue;  // (ctg::dyn)
      if (static_cast<std::uint64_t>(d) > max_static_elements / n) return false;
      n *= static_cast<std::uint64_t>(d);
    }
    return true;
  }(), "ctg: a tensor's static dims hold more than 2^56 elements");
};

// A shape carried as a value, so consteval functions can compute shapes.
struct shape_value {
  dim_t d[max_rank]{};
  std::size_t rank = 0;
  bool ok = true;  // false: the shapes did not fit (a shape mismatch)

  // The element count of a static shape.
  constexpr dim_t numel() const {
    dim_t n = 1;
    for (std::size_t i = 0; i < rank; ++i) n *= d[i];
    return n;
  }
};

template <class S>
consteval shape_value value_of() {
  shape_value v;
  v.rank = S::rank;
  for (std::size_t i = 0; i < v.rank; ++i) v.d[i] = S::dims[i];  // (v.rank: no "i < 0" when S is a scalar)
  return v;
}

// Turn a computed shape_value back into a shape type.
namespace detail {
template <shape_value V>
struct shape_from_impl {
  static constexpr shape_value v = V;  // a static copy: g++ 12 mis-handles V.d[I] directly
  template <std::size_t... I>
  static shape<v.d[I]...> make(std::index_sequence<I...>);
  using type = decltype(make(std::make_index_sequence<v.rank>{}));
};
}  // namespace detail
template <shape_value V>
using shape_from = typename detail::shape_from_impl<V>::type;

// One dim of a broadcast: equal dims stay; a static 1 stretches; a dyn dim
// against a static one takes the static one (checked at run time).
consteval bool broadcast_dim(dim_t a, dim_t b, dim_t& out) {
  if (a == b) { out = a; return true; }
  if (a == 1) { out = b; return true; }
  if (b == 1) { out = a; return true; }
  if (a == dyn) { out = b; return true; }
  if (b == dyn) { out = a; return true; }
  return false;
}

consteval shape_value broadcast_value(shape_value a, shape_value b) {
  shape_value r;
  r.rank = a.rank > b.rank ? a.rank : b.rank;
  for (std::size_t i = 0; i < r.rank; ++i) {  // i counts from the right
    const bool in_a = i < a.rank, in_b = i < b.rank;
    const dim_t da = in_a ? a.d[a.rank - 1 - i] : 1;
    const dim_t db = in_b ? b.d[b.rank - 1 - i] : 1;
    if (!broadcast_dim(da, db, r.d[r.rank - 1 - i])) r.ok = false;
  }
  return r;
}

template <class A, class B>
inline constexpr bool broadcastable_v = broadcast_value(value_of<A>(), value_of<B>()).ok;

template <class A, class B>
using broadcast_t = shape_from<broadcast_value(value_of<A>(), value_of<B>())>;

// True when From can be stretched to To by broadcasting alone: right-aligned,
// each of From's dims is 1 or matches To's (a dyn dim matches any non-1 dim).
template <class From, class To>
consteval bool stretches_to() {
  const std::size_t rank = From::rank;  // (not the constant itself: no "i < 0" for scalars)
  if (rank > To::rank) return false;
  for (std::size_t i = 0; i < rank; ++i) {
    const dim_t f = From::dims[From::rank - 1 - i], t = To::dims[To::rank - 1 - i];
    if (f != 1 && f != t && f != dyn && t != dyn) return false;
  }
  return true;
}

// A run-time shape: the static dims filled in with the fed sizes.
struct rt_shape {
  dim_t d[max_rank]{};
  std::size_t rank = 0;

  constexpr dim_t numel() const {
    dim_t n = 1;
    for (std::size_t i = 0; i < rank; ++i) n *= d[i];
    return n;
  }
  constexpr dim_t last() const { return rank ? d[rank - 1] : 1; }
  constexpr bool operator==(const rt_shape& o) const {
    if (rank != o.rank) return false;
    for (std::size_t i = 0; i < rank; ++i)
      if (d[i] != o.d[i]) return false;
    return true;
  }
};

// The shape of a batched product of a and b (rank 2 or more each) without
// its matrices: their leading dims broadcast by numpy's rule (a 1 stretches;
// the shapes' agreement is checked where they are resolved).
constexpr rt_shape product_batch_dims(const rt_shape& a, const rt_shape& b) {
  rt_shape r;
  r.rank = (a.rank > b.rank ? a.rank : b.rank) - 2;
  for (std::size_t i = 1; i <= r.rank; ++i) {
    const dim_t da = i + 2 <= a.rank ? a.d[a.rank - 2 - i] : 1, db = i + 2 <= b.rank ? b.d[b.rank - 2 - i] : 1;
    r.d[r.rank - i] = da == 1 ? db : da;
  }
  return r;
}

}  // namespace ctg
