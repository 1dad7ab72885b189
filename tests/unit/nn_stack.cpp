// nn::stack against nn::unrolled (the same layers as separate nodes): equal
// losses and gradients, bit for bit. Unrolled graphs grow exponentially with
// residual depth (which is why stack exists), so the full transformer block is
// compared at one layer (f32 here, autocast<bf16> in nn_stack_bf16.cpp) and a
// small residual block at three.
#include "../common/nested_stacks.hpp"
#include "nn_model_common.hpp"

using namespace nn_model;

TEST_CASE("stack<1, transformer block> equals the unrolled block, f32: loss and gradients bit for bit") {
  stack_equals_unrolled<ctg::precision::full<ctg::f32>>();
}

namespace {
// A small residual block, cheap enough to unroll three times.
template <ctg::fixed_string Prefix>
struct mlp_block {
  template <ctg::expr X>
  constexpr auto operator()(X x) const {
    using P = ctg::precision::full<ctg::f32>;
    return x + ctg::nn::linear<Prefix + ".down", 4, P>(ctg::silu(ctg::nn::linear<Prefix + ".up", 6, P, ctg::nn::bias::with>(
                   ctg::nn::rms_norm<Prefix + ".norm", P>(x))));
  }
};
}  // namespace

TEST_CASE("stack<3> of a residual block equals three unrolled blocks, bit for bit; layers get their own gradients") {
  using X = ctg::input<"x", ctg::f32, dyn, 4>;
  using R = ctg::input<"r", ctg::f32, dyn, 4>;
  auto sstep = ctg::value_and_grad(ctg::sum(ctg::nn::stack<3, mlp_block>(X{}) * R{}));
  auto ustep = ctg::value_and_grad(ctg::sum(ctg::nn::unrolled<3, mlp_block>(X{}) * R{}));
  ctg::cpu::device dev;
  auto ss = ctg::make_store(dev, sstep);
  auto us = ctg::make_store(dev, ustep);
  ctg::nn::init_params(us, 9, 0.5);
  copy_params(us, ss);
  gc::rng rng(4);
  const auto x = gc::data_of<float>(rng.vec(20, -1, 1)), r = gc::data_of<float>(rng.vec(20, -1, 1));
  CHECK(sstep(ss, ctg::feed<X>(x, 5), ctg::feed<R>(r, 5)) == ustep(us, ctg::feed<X>(x, 5), ctg::feed<R>(r, 5)));
  using SUp = ctg::param<"layers.{i}.up.weight", ctg::f32, 3, 4, 6>;
  using SB = ctg::param<"layers.{i}.up.bias", ctg::f32, 3, 6>;
  const auto g = gc::to_vec(ss.grad<SUp>()), gb = gc::to_vec(ss.grad<SB>());
  CHECK(std::vector<double>(g.begin(), g.begin() + 24) == gc::to_vec(us.grad<ctg::param<"layers.0.up.weight", ctg::f32, 4, 6>>()));
  CHECK(std::vector<double>(g.begin() + 24, g.begin() + 48) == gc::to_vec(us.grad<ctg::param<"layers.1.up.weight", ctg::f32, 4, 6>>()));
  CHECK(std::vector<double>(g.begin() + 48, g.end()) == gc::to_vec(us.grad<ctg::param<"layers.2.up.weight", ctg::f32, 4, 6>>()));
  CHECK(std::vector<double>(gb.begin() + 6, gb.begin() + 12) == gc::to_vec(us.grad<ctg::param<"layers.1.up.bias", ctg::f32, 6>>()));
  CHECK(std::vector<double>(g.begin(), g.begin() + 24) != std::vector<double>(g.begin() + 24, g.begin() + 48));
}


TEST_CASE("a forward step over stacks of 1 to 4 layers equals the unrolled layers, bit for bit") {
  // (A forward step's stack holds two layers' outputs in turn, the last in
  // the first slot: an odd and an even count each end there.)
  using X = ctg::input<"x", ctg::f32, dyn, 4>;
  gc::rng rng(6);
  const auto x = gc::data_of<float>(rng.vec(20, -1, 1));
  auto check = [&]<std::size_t N>(std::integral_constant<std::size_t, N>) {
    CAPTURE(N);
    auto sstep = ctg::forward(ctg::nn::stack<N, mlp_block>(X{}) * ctg::lit<2.0>);
    auto ustep = ctg::forward(ctg::nn::unrolled<N, mlp_block>(X{}) * ctg::lit<2.0>);
    ctg::cpu::device dev;
    auto ss = ctg::make_store(dev, sstep);
    auto us = ctg::make_store(dev, ustep);
    ctg::nn::init_params(us, 9, 0.5);
    copy_params(us, ss);
    sstep(ss, ctg::feed<X>(x, 5));
    ustep(us, ctg::feed<X>(x, 5));
    const auto sv = gc::to_vec(ss.value()), uv = gc::to_vec(us.value());
    REQUIRE(sv.size() == 20);
    CHECK(sv == uv);
  };
  check(std::integral_constant<std::size_t, 1>{});
  check(std::integral_constant<std::size_t, 2>{});
  check(std::integral_constant<std::size_t, 3>{});
  check(std::integral_constant<std::size_t, 4>{});
}

TEST_CASE("a stack inside a stacked block trains alike in every checkpointing mix, bit for bit") {
  // (Neither recomputing, the inner stack kept its layers' values in one
  // area that every outer layer overwrote: outer layer 0's gradients were
  // taken from layer 1's inner values, and the losses parted after the
  // first update: 1.6459 against 0.9292.)
  using C = ctg::checkpointing;
  using nested_stacks::nested_losses;
  const ctg::cpu::device dev{1};
  const std::vector<float> reference = nested_losses<C::every_layer, C::every_layer>(dev);
  CHECK(nested_losses<C::none, C::none>(dev) == reference);
  CHECK(nested_losses<C::none, C::every_layer>(dev) == reference);
  CHECK(nested_losses<C::every_layer, C::none>(dev) == reference);
}
