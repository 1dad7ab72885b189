#pragma once
// ctg::feed<X>(data, dyn_dims...): the data of input leaf X for one step, with
// one size per ctg::dyn dim of X, in order.
#include <cstddef>
#include <span>
#include <type_traits>

#include <ctg/graph/node.hpp>

namespace ctg {

template <class Leaf>
struct feed_t {
  using leaf = Leaf;
  std::span<const typename Leaf::dtype> data;
  dim_t dyn_dims[max_rank]{};
};

namespace detail {
template <class S>
consteval std::size_t dyn_count() {
  std::size_t n = 0;
  for (std::size_t i = 0; i < S::rank; ++i) n += S::dims[i] == dyn;
  return n;
}
}  // namespace detail

template <class Leaf, class... Sizes>
feed_t<Leaf> feed(std::span<const typename Leaf::dtype> data, Sizes... sizes) {
  static_assert(is_leaf_v<Leaf> && Leaf::fed, "ctg: feed<X> takes an input leaf");
  static_assert(sizeof...(Sizes) == detail::dyn_count<typename Leaf::dims>(),
                "ctg: feed<X>(data, sizes...) needs exactly one size per ctg::dyn dim of X");
  feed_t<Leaf> f{data, {}};
  std::size_t i = 0;
  ((f.dyn_dims[i++] = static_cast<dim_t>(sizes)), ...);
  return f;
}

// feed(X{}, data, sizes...): the same, naming the leaf by a value. In a .cu
// file this is the form to use: nvcc's host pass cannot spell a leaf's name
// inside a template argument list (README, "The CUDA backend").
template <class Leaf, class... Sizes>
  requires is_leaf_v<Leaf>
feed_t<Leaf> feed(Leaf, std::span<const typename Leaf::dtype> data, Sizes... sizes) {
  return feed<Leaf>(data, sizes...);
}

// Data of another element type than the leaf's (a std::vector<float> fed to
// an f64 input): one error that says so, not a list of overloads. ctg
// converts nothing it is fed.
template <class Leaf, class Data, class... Sizes>
  requires(!std::is_convertible_v<const Data&, std::span<const typename Leaf::dtype>>)
feed_t<Leaf> feed(const Data&, Sizes...) {
  static_assert(sizeof(Data) == 0,
                "ctg: feed<X> takes data of X's element type (a span or vector of X::dtype): convert the data first");
  return {};
}
template <class Leaf, class Data, class... Sizes>
  requires(is_leaf_v<Leaf> && !std::is_convertible_v<const Data&, std::span<const typename Leaf::dtype>>)
feed_t<Leaf> feed(Leaf, const Data& data, Sizes... sizes) {
  return feed<Leaf>(data, sizes...);
}

}  // namespace ctg
