#pragma once
// A store with no graph and no backend: one host vector per leaf, and only
// what the store-generic code (io::load_safetensors, nn::init_params) asks of
// a store: `step_type::nodes` and `param<L>()`. Leaves of any element type,
// fp8 ones included (which no trainable graph stores), at no compile cost.
//
//   test_util::leaf_store<W, B, ctg::input<"x", ctg::f32, ctg::dyn>> s;   // inputs: no values
//   s.param<W>()[0] = 1.0f;
//   s.bytes();   // every stored leaf's bytes, in order: compare before/after
#include <cstddef>
#include <cstring>
#include <span>
#include <tuple>
#include <vector>

#include <ctg/graph/node.hpp>

namespace test_util {

template <class... Ls>
struct leaf_store {
  struct step_type {
    using nodes = ctg::tl::list<Ls...>;
  };
  std::tuple<std::vector<typename Ls::dtype>...> values{
      std::vector<typename Ls::dtype>(Ls::fed ? 0 : Ls::dims::static_numel)...};

  template <class L>
  std::span<typename L::dtype> param() {
    return std::get<ctg::tl::index_of<L, ctg::tl::list<Ls...>>::value>(values);
  }
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> out;
    std::apply(
        [&](const auto&... v) {
          ((out.insert(out.end(), reinterpret_cast<const unsigned char*>(v.data()),
                       reinterpret_cast<const unsigned char*>(v.data() + v.size()))),
           ...);
        },
        values);
    return out;
  }
};

}  // namespace test_util
