// Sharding as a type transform on leaves (graph/sharding.hpp, dist/shard.hpp):
// what the types say, and that a sharded model run as one rank computes the
// unsharded model's loss and gradients, bit for bit (plain and FP8, where
// the quantized weight is sharded after quantization).
#include <doctest/doctest.h>

#include <vector>

#include <ctg/ctg.hpp>

namespace {
using ctg::dyn;
using X = ctg::input<"x", ctg::f32, dyn, 8>;
using T = ctg::input<"t", ctg::f32, dyn, 4>;
using W1 = ctg::param<"w1", ctg::f32, 8, 8>;
using W2 = ctg::param<"w2", ctg::f32, 8, 4>;
using F = ctg::frozen<"f", ctg::f32, 8, 8>;
using D = ctg::precision::delayed<4>;
template <ctg::fixed_string Name>
using S = ctg::scaling::delayed<Name, D>;
using V = std::vector<float>;

// Two products, the second in FP8; Shard decides whether the weights are sharded.
template <bool Shard>
auto loss() {
  auto w1 = [] {
    if constexpr (Shard) return ctg::dist::shard(W1{});
    else return W1{};
  }();
  auto w2q = [] {
    if constexpr (Shard) return ctg::dist::shard(ctg::quantize<ctg::e4m3, S<"w2">>(W2{}));
    else return ctg::quantize<ctg::e4m3, S<"w2">>(W2{});
  }();
  auto h = ctg::tanh(ctg::matmul(X{}, w1));
  auto y = ctg::fp8_matmul<ctg::f32, S<"g">>(ctg::quantize<ctg::e4m3, S<"h">>(h), w2q);
  return ctg::mean(ctg::square(y - T{}));
}
}  // namespace

// What the types say.
using SW1 = ctg::sharded_leaf<W1>;
static_assert(CTG_SAME(decltype(ctg::dist::shard(W1{})), SW1));
static_assert(ctg::is_sharded_v<SW1> && !ctg::is_sharded_v<W1>);
static_assert(ctg::is_sharded_v<decltype(ctg::dist::shard(ctg::quantize<ctg::e4m3, S<"w2">>(W2{})))>);
static_assert(!ctg::is_sharded_v<decltype(ctg::quantize<ctg::e4m3, S<"w2">>(W2{}))>);
static_assert(ctg::is_sharded_v<decltype(ctg::dist::shard(F{}))>);  // a frozen leaf is gathered, never reduced
// A stacked sharded leaf (nn::stack re-dims its leaves) is still sharded.
static_assert(ctg::is_sharded_v<SW1::with_dims<3, 8, 8>>);
static_assert(ctg::sharded_leaf<W1>::with_dims<3, 8, 8>::dims::rank == 3);
// What a quantizer of these would see: one rank's slice (B3: quantize before
// shard), through a transpose, a view, a scale, a sum with another tensor or
// gathered rows; whole values through a product or a reduction.
namespace sees {
using ctg::node_t;
using ctg::detail::sees_a_shard;
static_assert(sees_a_shard<node_t<decltype(ctg::transpose(ctg::dist::shard(W1{})))>>());
static_assert(sees_a_shard<node_t<decltype(ctg::reshape<ctg::shape<64>>(ctg::dist::shard(W1{})))>>());
static_assert(sees_a_shard<node_t<decltype(ctg::dist::shard(W1{}) * ctg::lit<0.5>)>>());
static_assert(sees_a_shard<node_t<decltype(W1{} + ctg::cast<ctg::f32>(ctg::dist::shard(W1{})))>>());
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn>;
static_assert(sees_a_shard<node_t<decltype(ctg::gather(ctg::dist::shard(W1{}), Ids{}))>>());
static_assert(!sees_a_shard<node_t<decltype(ctg::matmul(ctg::dist::shard(W1{}), W1{}))>>());
static_assert(!sees_a_shard<node_t<decltype(ctg::sum<0>(ctg::dist::shard(W1{})))>>());
static_assert(!sees_a_shard<node_t<decltype(W1{} * ctg::lit<0.5>)>>());
}  // namespace sees

// value_and_grad(loss) differentiates the sharded leaf.
using sharded_wrt = decltype(ctg::value_and_grad(loss<true>()))::wrt;
static_assert(ctg::tl::contains<SW1, sharded_wrt>::value && ctg::tl::contains<W2, sharded_wrt>::value &&
              sharded_wrt::size == 2);

TEST_CASE("a sharded model run as one rank: the unsharded model's loss and gradients, bit for bit") {
  auto plain = ctg::value_and_grad(loss<false>());
  auto sharded = ctg::value_and_grad(loss<true>());
  ctg::cpu::device dev;
  auto a = ctg::make_store(dev, plain);
  auto b = ctg::make_store(dev, sharded);
  ctg::nn::init_params(a, 7, 0.5);
  ctg::nn::init_params(b, 7, 0.5);  // (the same names: the same values)
  REQUIRE(V(a.param<W1>().begin(), a.param<W1>().end()) == V(b.param<SW1>().begin(), b.param<SW1>().end()));
  V x(3 * 8), t(3 * 4);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(static_cast<int>(i % 7) - 3);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = 0.05f * static_cast<float>(i % 5);
  for (int s = 0; s < 3; ++s) {  // (delayed scaling: later steps use the states the first ones updated)
    const float la = plain(a, ctg::feed<X>(x, 3), ctg::feed<T>(t, 3));
    const float lb = sharded(b, ctg::feed<X>(x, 3), ctg::feed<T>(t, 3));
    CHECK(la == lb);
    CHECK(la > 0.0f);
    CHECK(V(a.grad<W1>().begin(), a.grad<W1>().end()) == V(b.grad<SW1>().begin(), b.grad<SW1>().end()));
    CHECK(V(a.grad<W2>().begin(), a.grad<W2>().end()) == V(b.grad<W2>().begin(), b.grad<W2>().end()));
    x[static_cast<std::size_t>(s)] += 1.5f;  // another amax next step
  }
  CHECK(a.param<S<"w2">::scale_leaf>()[0] == b.param<S<"w2">::scale_leaf>()[0]);
}

// The policy form of the right order: precision::sharded<fp8<...>> quantizes
// each weight whole, then shards the quantized tensor (and the fp8 policy on
// an already-sharded weight is the compile-fail pair b3_fp8_policy_on_sharded_model).
namespace {
using P = ctg::precision::fp8<D>;
using SP = ctg::precision::sharded<P>;
using plain_product = decltype(ctg::precision::weight_matmul<P>(X{}, W1{}));
using sharded_product = decltype(ctg::precision::weight_matmul<SP>(X{}, W1{}));
using plain_weight = ctg::tl::at_t<1, typename plain_product::children>;
using sharded_weight = ctg::tl::at_t<1, typename sharded_product::children>;
}  // namespace
static_assert(sharded_weight::kind == ctg::node_kind::quantize && ctg::is_sharded_v<sharded_weight>);
static_assert(plain_weight::kind == ctg::node_kind::quantize && !ctg::is_sharded_v<plain_weight>);
// The same leaf, recipe and scaling state under both: only the payload's sharding differs.
using sharded_weight_leaf = ctg::tl::at_t<0, typename sharded_weight::children>;
static_assert(CTG_SAME(sharded_weight_leaf, W1));
static_assert(CTG_SAME(typename sharded_weight::scaling, typename plain_weight::scaling));
// Not an fp8 policy: sharded<P> is P.
using AC = ctg::precision::autocast<ctg::bf16>;
using SAC = ctg::precision::sharded<AC>;
static_assert(std::is_same_v<decltype(ctg::precision::weight_matmul<SAC>(X{}, W1{})),
                             decltype(ctg::precision::weight_matmul<AC>(X{}, W1{}))>);
