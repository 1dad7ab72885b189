#pragma once
// ctg::feed<X>(data, dyn_dims...): the data of input leaf X for one step, with
// one size per ctg::dyn dim of X, in order. The feed views the data (no
// copy), except a temporary std::vector, which it keeps: a feed kept in a
// variable (auto f = feed<X>(load_batch(), b); step(store, f)) read the
// vector's freed memory.
#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <ctg/graph/node.hpp>

namespace ctg {

template <class Leaf>
struct feed_t {
  using leaf = Leaf;
  std::span<const typename Leaf::dtype> data;
  dim_t dyn_dims[max_rank]{};
  std::shared_ptr<const std::vector<typename Leaf::dtype>> owned{};  // data's vector, when given a temporary
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

// A temporary vector: the feed takes it over (its buffer moves, so data
// stays valid as the feed is copied or moved).
template <class Leaf, class... Sizes>
feed_t<Leaf> feed(std::vector<typename Leaf::dtype>&& data, Sizes... sizes) {
  auto owned = std::make_shared<const std::vector<typename Leaf::dtype>>(std::move(data));
  feed_t<Leaf> f = feed<Leaf>(std::span<const typename Leaf::dtype>(*owned), sizes...);
  f.owned = std::move(owned);
  return f;
}
// (A const temporary, `const std::vector<float> load()`'s, cannot move: copied.)
template <class Leaf, class... Sizes>
feed_t<Leaf> feed(const std::vector<typename Leaf::dtype>&& data, Sizes... sizes) {
  return feed<Leaf>(std::vector<typename Leaf::dtype>(data), sizes...);
}

// feed(X{}, data, sizes...): the same, naming the leaf by a value. In a .cu
// file this is the form to use: nvcc's host pass cannot spell a leaf's name
// inside a template argument list (README, "The CUDA backend").
template <class Leaf, class... Sizes>
  requires is_leaf_v<Leaf>
feed_t<Leaf> feed(Leaf, std::span<const typename Leaf::dtype> data, Sizes... sizes) {
  return feed<Leaf>(data, sizes...);
}
template <class Leaf, class... Sizes>
  requires is_leaf_v<Leaf>
feed_t<Leaf> feed(Leaf, std::vector<typename Leaf::dtype>&& data, Sizes... sizes) {
  return feed<Leaf>(std::move(data), sizes...);
}
template <class Leaf, class... Sizes>
  requires is_leaf_v<Leaf>
feed_t<Leaf> feed(Leaf, const std::vector<typename Leaf::dtype>&& data, Sizes... sizes) {
  return feed<Leaf>(std::vector<typename Leaf::dtype>(data), sizes...);
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
