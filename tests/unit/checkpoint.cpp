// Checkpoint regions: the values inside a region are not kept for backward
// but recomputed, by running the region's groups again. Losses and gradients
// must be bitwise those of the same graph without checkpoints, the regions
// must really be recomputed, and fewer bytes must be kept.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include <ctg/lower/describe.hpp>

#include "grad_check.hpp"

namespace {
using ctg::dyn;
using X = ctg::input<"x", ctg::f32, dyn, 16>;
using W1 = ctg::param<"w1", ctg::f32, 16, 32>;
using W2 = ctg::param<"w2", ctg::f32, 32, 32>;
using W3 = ctg::param<"w3", ctg::f32, 32, 16>;
using S = ctg::param<"s", ctg::f32, 32>;

// Three blocks; the second and third both read the first's output (regions
// sharing an input), and a value inside block 2 also feeds the loss directly
// (so it is kept, and is no part of the region).
template <bool Ckpt>
constexpr auto mark(auto e) {
  if constexpr (Ckpt) return ctg::checkpoint(e);
  else return e;
}
template <bool Ckpt>
constexpr auto model() {
  X x;
  auto h1 = mark<Ckpt>(ctg::silu(ctg::matmul(x, W1{})) * S{});
  auto inner = ctg::matmul(h1, W2{});
  auto h2 = mark<Ckpt>(ctg::tanh(inner) + ctg::exp(ctg::lit<-1.0> * ctg::square(inner)));
  auto h3 = mark<Ckpt>(ctg::matmul(ctg::softmax(h2 * h1), W3{}));
  return ctg::mean(ctg::square(h3)) + ctg::mean(ctg::sigmoid(inner)) * ctg::lit<0.25>;
}

template <class Step>
using prog = ctg::program<Step>;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& e : v) e = u(rng);
  return v;
}

template <class Store>
void init(Store& st) {
  auto fill = [&](auto span, unsigned seed) {
    auto v = random_floats(span.size(), seed);
    std::copy(v.begin(), v.end(), span.begin());
  };
  fill(st.template param<W1>(), 1);
  fill(st.template param<W2>(), 2);
  fill(st.template param<W3>(), 3);
  fill(st.template param<S>(), 4);
}

template <class A, class B>
bool same_bits(A a, B b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}
}  // namespace

TEST_CASE("checkpointed regions are recomputed in backward, and only they") {
  using plain = decltype(ctg::value_and_grad(model<false>()));
  using ckpt = decltype(ctg::value_and_grad(model<true>()));
  constexpr auto& p = prog<plain>::table;
  constexpr auto& c = prog<ckpt>::table;
  static_assert(p.region_count == 0 && p.len == ctg::group_count_v<plain>);
  // Each of the three regions holds a matmul whose output backward reads.
  static_assert(c.region_count == 3);
  constexpr std::size_t recomputed = [] {
    std::size_t n = 0;
    for (std::size_t q = 0; q < c.len; ++q) n += c.recompute[q];
    return n;
  }();
  static_assert(recomputed > 0 && c.len == ctg::group_count_v<ckpt> + recomputed);
  // Recompute runs only in backward.
  static_assert([] {
    for (std::size_t q = 0; q < c.backward_begin; ++q)
      if (c.recompute[q]) return false;
    return true;
  }());
}

TEST_CASE("with and without checkpoints: bitwise equal losses and gradients, fewer bytes kept") {
  auto plain_step = ctg::value_and_grad(model<false>());
  auto ckpt_step = ctg::value_and_grad(model<true>());
  ctg::cpu::device dev;
  auto a = ctg::make_store(dev, plain_step);
  auto b = ctg::make_store(dev, ckpt_step);
  init(a);
  init(b);
  for (int batch : {7, 33, 5}) {  // shapes change: buffers are placed again
    const auto x = random_floats(static_cast<std::size_t>(batch) * 16, 10 + batch);
    const float la = plain_step(a, ctg::feed<X>(x, batch));
    const float lb = ckpt_step(b, ctg::feed<X>(x, batch));
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    CHECK(same_bits(a.grad<W1>(), b.grad<W1>()));
    CHECK(same_bits(a.grad<W2>(), b.grad<W2>()));
    CHECK(same_bits(a.grad<W3>(), b.grad<W3>()));
    CHECK(same_bits(a.grad<S>(), b.grad<S>()));
    CHECK(b.kept_bytes() < a.kept_bytes());
    MESSAGE("batch " << batch << ": kept " << a.kept_bytes() << " -> " << b.kept_bytes() << " bytes, scratch "
                     << a.scratch_bytes() << " -> " << b.scratch_bytes());
  }
  // The unfused reference agrees too (each node its own buffer and loop).
  auto u_step = ctg::unfused(ckpt_step);
  auto u = ctg::make_store(dev, u_step);
  init(u);
  const auto x = random_floats(9 * 16, 99);
  const float lu = u_step(u, ctg::feed<X>(x, 9));
  const float lb = ckpt_step(b, ctg::feed<X>(x, 9));
  CHECK(std::memcmp(&lu, &lb, sizeof lu) == 0);
  CHECK(same_bits(u.grad<W2>(), b.grad<W2>()));
}

TEST_CASE("a checkpointed step's gradients match finite differences") {
  using X64 = ctg::input<"x", ctg::f64, dyn, 3>;
  using A = ctg::param<"a", ctg::f64, 3, 4>;
  using Bw = ctg::param<"b", ctg::f64, 4, 3>;
  X64 x;
  auto h = ctg::checkpoint(ctg::tanh(ctg::matmul(x, A{})));
  auto y = ctg::checkpoint(ctg::matmul(ctg::square(h) + h, Bw{}));
  auto loss = ctg::sum(ctg::exp(y * ctg::lit<0.3>));
  auto step = ctg::value_and_grad(loss);
  static_assert(prog<decltype(step)>::table.region_count == 2);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  gc::rng r(5);
  gc::set<A>(st, r.vec(12, -1, 1));
  gc::set<Bw>(st, r.vec(12, -1, 1));
  const std::vector<double> xs{0.1, -0.4, 0.7, 1.2, -0.3, 0.05};
  gc::check_grad<A>(step, st, gc::f64_tol, ctg::feed<X64>(xs, 2));
  gc::check_grad<Bw>(step, st, gc::f64_tol, ctg::feed<X64>(xs, 2));
}

TEST_CASE("a checkpoint without backward (a forward step) frees its region after use") {
  X x;
  auto e = ctg::checkpoint(ctg::silu(ctg::matmul(x, W1{})));
  auto step = ctg::forward(ctg::sum<-1>(e));
  constexpr auto& t = prog<decltype(step)>::table;
  static_assert(t.region_count == 0 && t.backward_begin == t.len);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  auto w = random_floats(16 * 32, 3);
  std::copy(w.begin(), w.end(), st.param<W1>().begin());
  const auto xs = random_floats(4 * 16, 4);
  step(st, ctg::feed<X>(xs, 4));
  CHECK(st.kept_bytes() == 0);
  REQUIRE(st.value().size() == 4);
  for (int r = 0; r < 4; ++r) {
    double ref = 0;
    for (int j = 0; j < 32; ++j) {
      double z = 0;
      for (int k = 0; k < 16; ++k) z += double(xs[r * 16 + k]) * double(w[k * 32 + j]);
      ref += z / (1 + std::exp(-z));
    }
    CHECK(st.value()[r] == doctest::Approx(ref).epsilon(1e-5));
  }
}

// A gradient can be a view (here: of the matmul that computes it, reshaped
// back to the parameter's shape). Its buffer must live to the end of the step,
// although no group reads it: found when grad/x of attention came out wrong.
TEST_CASE("an output that is a view keeps its buffer to the end of the step") {
  using V = ctg::param<"v", ctg::f64, 6>;
  using Wv = ctg::param<"wv", ctg::f64, 3, 4>;
  using Wu = ctg::param<"wu", ctg::f64, 4, 5>;
  auto y = ctg::tanh(ctg::matmul(ctg::reshape<ctg::shape<2, 3>>(V{}), Wv{}));
  auto loss = ctg::sum(ctg::square(ctg::matmul(y, Wu{})));
  auto step = ctg::value_and_grad(loss);
  using Step = decltype(step);
  constexpr auto& t = ctg::schedule<Step>::table;
  constexpr auto& p = prog<Step>::table;
  static_assert([] {
    bool some_view_output = false;
    for (std::size_t i = 0; i < ctg::schedule<Step>::size; ++i) {
      if (!t.node[i].output || !p.owns[p.base[i]]) continue;
      some_view_output = some_view_output || p.base[i] != i;
      if (p.value[p.base[i]].end != p.len) return false;
    }
    return some_view_output;
  }());
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  gc::rng r(8);
  gc::set<V>(st, r.vec(6, -1, 1));
  gc::set<Wv>(st, r.vec(12, -1, 1));
  gc::set<Wu>(st, r.vec(20, -1, 1));
  gc::check_grad<V>(step, st, gc::f64_tol);
  gc::check_grad<Wv>(step, st, gc::f64_tol);
  gc::check_grad<Wu>(step, st, gc::f64_tol);
}

// A region's recompute runs only what backward reads of it and what that
// reads: here tanh's value (its gradient reads it) and the product below
// it, not the region's last product, whose output only the checkpoint read.
TEST_CASE("a region's recompute skips the groups whose values backward never reads") {
  X x;
  auto inner = ctg::matmul(x, W1{});
  auto t = ctg::tanh(inner);
  auto last = ctg::matmul(t, W2{});
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::checkpoint(last))));
  using St = decltype(step);
  constexpr const auto& d = ctg::description<St>;
  auto recomputed = [&](auto node) {
    return d.group[d.node[ctg::tl::index_of<decltype(node), St::nodes>::value].group].recomputed;
  };
  CHECK(recomputed(inner));
  CHECK(recomputed(t));
  CHECK(!recomputed(last));
  CHECK(d.node[ctg::tl::index_of<decltype(last), St::nodes>::value].region != ctg::no_index);  // (in the region)
  // The same bits as without the checkpoint.
  auto plain = ctg::value_and_grad(ctg::mean(ctg::square(last)));
  ctg::cpu::device dev;
  auto a = ctg::make_store(dev, step);
  auto b = ctg::make_store(dev, plain);
  const auto w1 = random_floats(16 * 32, 41), w2 = random_floats(32 * 32, 42), xs = random_floats(5 * 16, 43);
  std::copy(w1.begin(), w1.end(), a.param<W1>().begin());
  std::copy(w1.begin(), w1.end(), b.param<W1>().begin());
  std::copy(w2.begin(), w2.end(), a.param<W2>().begin());
  std::copy(w2.begin(), w2.end(), b.param<W2>().begin());
  const float la = step(a, ctg::feed<X>(xs, 5)), lb = plain(b, ctg::feed<X>(xs, 5));
  CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
  CHECK(same_bits(a.grad<W1>(), b.grad<W1>()));
  CHECK(same_bits(a.grad<W2>(), b.grad<W2>()));
  CHECK(a.kept_bytes() < b.kept_bytes());
}
