#pragma once
// Shared by the nn_model*.cpp tests: a small transformer config, its feeds,
// and copying unrolled parameters into a stack's stacked leaves.
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "grad_check.hpp"

namespace nn_model {
using ctg::dyn;
using ctg::i32;

struct small_config {
  static constexpr ctg::dim_t vocab = 7, max_seq = 5, dim = 4, heads = 2, head_dim = 3, hidden = 6;
  static constexpr std::size_t layers = 2;
};
struct one_layer : small_config {
  static constexpr std::size_t layers = 1;
};
struct four_layers : small_config {
  static constexpr std::size_t layers = 4;
};
using Ids = ctg::input<"ids", i32, dyn, dyn>;
using Pos = ctg::input<"pos", i32, dyn>;
using Tg = ctg::input<"targets", i32, dyn, dyn>;

const std::vector<i32> ids{1, 4, 4, 0, 6, 2, 2, 5};  // batch 2, T 4
const std::vector<i32> pos{0, 1, 2, 3};
const std::vector<i32> targets{4, 4, 0, 6, 2, -100, 5, 1};  // one ignored

template <class Step, class Store>
double run(Step& step, Store& st) {
  return step(st, ctg::feed<Ids>(ids, 2, 4), ctg::feed<Pos>(pos, 4), ctg::feed<Tg>(targets, 2, 4));
}

// Checks every trainable leaf's gradient by central differences.
template <class Step, class Store>
void check_all_grads(Step& step, Store& st) {
  [&]<class... Ps>(ctg::tl::list<Ps...>) {
    auto one = [&]<class P>(std::type_identity<P>) {
      INFO("parameter " << std::string(P::name.c_str()));
      gc::check_grad<P>(step, st, gc::f64_tol, ctg::feed<Ids>(ids, 2, 4), ctg::feed<Pos>(pos, 4),
                        ctg::feed<Tg>(targets, 2, 4));
    };
    (one(std::type_identity<Ps>{}), ...);
  }(typename Step::wrt{});
}
}  // namespace

namespace nn_model {
// The stacked store's leaves by name, as bytes.
using named_bytes = std::vector<std::pair<std::string, std::span<std::byte>>>;

// Copy an unrolled leaf's values into its stacked leaf ("layers.k.x" -> slice
// k of "layers.{i}.x"; another name to the leaf of that name). Not a
// template: matched at compile time, the copy and its checks were compiled
// once for every pair of an unrolled and a stacked leaf.
inline void copy_leaf(std::string name, std::span<const std::byte> src, const named_bytes& stacked) {
  std::size_t layer = 0;
  if (name.rfind("layers.", 0) == 0) {
    const std::size_t dot = name.find('.', 7);
    layer = std::stoul(name.substr(7, dot - 7));
    name = "layers.{i}" + name.substr(dot);
  }
  for (const auto& [n, dst] : stacked)
    if (n == name) {
      REQUIRE(dst.size() >= (layer + 1) * src.size());
      std::copy(src.begin(), src.end(), dst.begin() + layer * src.size());
      return;
    }
  FAIL_CHECK("no stacked leaf for " << name);
}

// Copy every unrolled leaf's values into the stacked store.
template <class UStore, class SStore>
void copy_params(UStore& us, SStore& ss) {
  named_bytes stacked;
  [&]<class... Ss>(ctg::tl::list<Ss...>) {
    auto add = [&]<class S>(std::type_identity<S>) {
      if constexpr (!S::fed) stacked.emplace_back(S::name.c_str(), std::as_writable_bytes(ss.template param<S>()));
    };
    (add(std::type_identity<Ss>{}), ...);
  }(ctg::leaves_t<typename SStore::step_type::nodes>{});
  [&]<class... Us>(ctg::tl::list<Us...>) {
    auto one = [&]<class U>(std::type_identity<U>) {
      if constexpr (!U::fed) copy_leaf(U::name.c_str(), std::as_bytes(us.template param<U>()), stacked);
    };
    (one(std::type_identity<Us>{}), ...);
  }(ctg::leaves_t<typename UStore::step_type::nodes>{});
}
}  // namespace


namespace nn_model {
// stack<1, block> against the same block unrolled: loss and gradients, bit for bit.
template <class P>
void stack_equals_unrolled() {
  using M = ctg::nn::transformer<one_layer, P>;
  auto sloss = ctg::nn::cross_entropy(M::logits(Ids{}, Pos{}), Tg{});
  auto uloss = ctg::nn::cross_entropy(M::logits_unrolled(Ids{}, Pos{}), Tg{});
  auto sstep = ctg::value_and_grad(sloss);
  auto ustep = ctg::value_and_grad(uloss);
  ctg::cpu::device dev;
  auto ss = ctg::make_store(dev, sstep);
  auto us = ctg::make_store(dev, ustep);
  ctg::nn::init_params(us, 3, 0.3);
  copy_params(us, ss);
  const float ls = run(sstep, ss), lu = run(ustep, us);
  CHECK(ls == lu);
  // Gradients: the unrolled layer k's gradient is slice k of the stacked one.
  using T = typename P::param_type;
  using SW1 = ctg::param<"layers.{i}.mlp.w1", T, 1, 4, 6>;
  using UW1 = ctg::param<"layers.0.mlp.w1", T, 4, 6>;
  using SWQ = ctg::param<"layers.{i}.attn.wq", T, 1, 6, 4>;
  using UWQ = ctg::param<"layers.0.attn.wq", T, 6, 4>;
  using STOK = ctg::param<"tok.weight", T, 7, 4>;
  const auto sw1 = gc::to_vec(ss.template grad<SW1>());
  CHECK(sw1 == gc::to_vec(us.template grad<UW1>()));
  CHECK(gc::to_vec(ss.template grad<SWQ>()) == gc::to_vec(us.template grad<UWQ>()));
  CHECK(gc::to_vec(ss.template grad<STOK>()) == gc::to_vec(us.template grad<STOK>()));
  double norm = 0;
  for (double g : sw1) norm += g * g;
  CHECK(norm > 0);  // the comparison is not between two zero vectors
}

}  // namespace nn_model
