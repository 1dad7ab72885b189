// nn::stack keeps every layer's values for backward by default; with
// checkpointing::every_layer it keeps only the layer inputs and recomputes
// each layer in backward. Both must give the same bits, and checkpointing
// must keep fewer bytes.
#include <cstring>

#include "grad_check.hpp"

namespace {
using ctg::dyn;
template <ctg::fixed_string Prefix>
struct mlp_block {
  template <ctg::expr X>
  constexpr auto operator()(X x) const {
    using P = ctg::precision::full<typename X::dtype>;
    auto h = ctg::nn::linear<Prefix + ".up", 12, P, ctg::nn::bias::with>(ctg::nn::rms_norm<Prefix + ".norm", P>(x));
    return x + ctg::nn::linear<Prefix + ".down", 4, P>(ctg::silu(h) * ctg::tanh(h));
  }
};
template <class T>
using X = ctg::input<"x", T, dyn, 4>;
template <class T>
using R = ctg::input<"r", T, dyn, 4>;
template <class T, ctg::nn::checkpointing C>
constexpr auto loss() {
  return ctg::sum(ctg::nn::stack<3, mlp_block, C>(X<T>{}) * R<T>{});
}
using Up = ctg::param<"layers.{i}.up.weight", ctg::f32, 3, 4, 12>;
using Down = ctg::param<"layers.{i}.down.weight", ctg::f32, 3, 12, 4>;
using Norm = ctg::param<"layers.{i}.norm.scale", ctg::f32, 3, 4>;
}  // namespace

TEST_CASE("stack<3>: every_layer checkpointing gives the same bits and keeps fewer bytes") {
  using none = ctg::nn::checkpointing;
  auto kstep = ctg::value_and_grad(loss<ctg::f32, none::none>());
  auto cstep = ctg::value_and_grad(loss<ctg::f32, none::every_layer>());
  ctg::cpu::device dev;
  auto ks = ctg::make_store(dev, kstep);
  auto cs = ctg::make_store(dev, cstep);
  ctg::nn::init_params(ks, 3, 0.5);
  ctg::nn::init_params(cs, 3, 0.5);
  gc::rng rng(8);
  for (int batch : {6, 2, 11}) {
    const auto x = gc::data_of<float>(rng.vec(4 * batch, -1, 1)), r = gc::data_of<float>(rng.vec(4 * batch, -1, 1));
    const float lk = kstep(ks, ctg::feed<X<ctg::f32>>(x, batch), ctg::feed<R<ctg::f32>>(r, batch));
    const float lc = cstep(cs, ctg::feed<X<ctg::f32>>(x, batch), ctg::feed<R<ctg::f32>>(r, batch));
    CHECK(std::memcmp(&lk, &lc, sizeof lk) == 0);
    auto same = [](auto a, auto b) { return std::memcmp(a.data(), b.data(), a.size_bytes()) == 0; };
    CHECK(same(ks.grad<Up>(), cs.grad<Up>()));
    CHECK(same(ks.grad<Down>(), cs.grad<Down>()));
    CHECK(same(ks.grad<Norm>(), cs.grad<Norm>()));
    CHECK(cs.kept_bytes() < ks.kept_bytes());
    MESSAGE("batch " << batch << ": kept " << ks.kept_bytes() << " bytes, " << cs.kept_bytes() << " with checkpointing");
  }
}

TEST_CASE("stack<3> gradients match finite differences, kept and checkpointed (f64)") {
  using N = ctg::nn::checkpointing;
  auto check = [](auto step) {
    ctg::cpu::device dev;
    auto st = ctg::make_store(dev, step);
    ctg::nn::init_params(st, 5, 0.5);
    gc::rng rng(2);
    const auto x = rng.vec(12, -1, 1), r = rng.vec(12, -1, 1);
    using U = ctg::param<"layers.{i}.up.weight", ctg::f64, 3, 4, 12>;
    using D = ctg::param<"layers.{i}.down.weight", ctg::f64, 3, 12, 4>;
    gc::check_grad<U>(step, st, gc::f64_tol, ctg::feed<X<ctg::f64>>(x, 3), ctg::feed<R<ctg::f64>>(r, 3));
    gc::check_grad<D>(step, st, gc::f64_tol, ctg::feed<X<ctg::f64>>(x, 3), ctg::feed<R<ctg::f64>>(r, 3));
  };
  check(ctg::value_and_grad(loss<ctg::f64, N::none>()));
  check(ctg::value_and_grad(loss<ctg::f64, N::every_layer>()));
}
