// Bad input at run time throws ctg::error naming the leaf, the expected and the
// actual value, and a step that throws changes no parameter or gradient.
// (Which inputs are fed is checked at compile time: tests/compile_fail/feed_*.cpp.)
#include "error_message.hpp"
#include <doctest/doctest.h>

#include <ctg/ctg.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {
using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using Y = ctg::input<"y", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;

auto make_loss() { return ctg::mean(ctg::square(ctg::matmul(X{} + Y{}, W{}))); }
using step_t = decltype(ctg::value_and_grad(make_loss(), ctg::wrt<W>));

using test_util::message_of;

struct fixture {
  step_t step;
  ctg::cpu::device dev;
  decltype(ctg::make_store(dev, step)) store = ctg::make_store(dev, step);
  std::vector<float> x = std::vector<float>(2 * 8, 0.5f), y = std::vector<float>(2 * 8, 0.25f);
  fixture() {
    auto w = store.param<W>();
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(i);
  }
  float good_step() { return step(store, ctg::feed<X>(x, 2), ctg::feed<Y>(y, 2)); }
  std::vector<float> params() { return {store.param<W>().begin(), store.param<W>().end()}; }
  std::vector<float> grads() { return {store.grad<W>().begin(), store.grad<W>().end()}; }
};
}  // namespace

TEST_CASE("a feed whose size disagrees with its dims names the input and both counts") {
  fixture f;
  f.good_step();
  const auto p = f.params(), g = f.grads();
  const std::vector<float> short_x(15, 1.0f);
  const auto m = message_of([&] { f.step(f.store, ctg::feed<X>(short_x, 2), ctg::feed<Y>(f.y, 2)); });
  CHECK(m.find("'x'") != std::string::npos);
  CHECK(m.find("16") != std::string::npos);
  CHECK(m.find("15") != std::string::npos);
  CHECK(f.params() == p);
  CHECK(f.grads() == g);
}

TEST_CASE("dyn dims that disagree between inputs are a run-time shape mismatch") {
  fixture f;
  f.good_step();
  const auto g = f.grads();
  const std::vector<float> y3(3 * 8, 1.0f);
  const auto m = message_of([&] { f.step(f.store, ctg::feed<X>(f.x, 2), ctg::feed<Y>(y3, 3)); });
  CHECK(m.find("shape mismatch") != std::string::npos);
  // The inputs the op reads, as fed (the message gave the sizes alone: which feed was wrong?).
  CHECK(m.find("it reads 'x' fed [2, 8], 'y' fed [3, 8]") != std::string::npos);
  CHECK(f.grads() == g);
}

TEST_CASE("a dyn dim fed 1 does not stretch: against another size it is a shape mismatch, in either order") {
  // (Stretched, its gradient would not be summed over the other size: a
  // wrong gradient. Only a static 1 broadcasts.)
  fixture f;
  f.good_step();
  const auto g = f.grads();
  const std::vector<float> one(8, 1.0f), three(3 * 8, 1.0f);
  for (const bool x_first : {true, false}) {
    const auto m = message_of([&] {
      if (x_first) f.step(f.store, ctg::feed<X>(one, 1), ctg::feed<Y>(three, 3));
      else f.step(f.store, ctg::feed<X>(three, 3), ctg::feed<Y>(one, 1));
    });
    CHECK(m.find("shape mismatch at run time in an elementwise op") != std::string::npos);
    CHECK(m.find("never broadcasts") != std::string::npos);
    CHECK(f.grads() == g);
  }
  // Matmul batch dims: [dyn, 1, 2, 8] @ [dyn, 3, 8, 4], the first dyn fed 1 and the second 3.
  using A = ctg::input<"a", ctg::f32, ctg::dyn, 1, 2, 8>;
  using B = ctg::input<"b", ctg::f32, ctg::dyn, 3, 8, 4>;
  auto batched = ctg::forward(ctg::sum(ctg::matmul(A{}, B{})));
  auto s = ctg::make_store(f.dev, batched);
  const std::vector<float> a1(1 * 2 * 8, 1.0f), a3(3 * 2 * 8, 1.0f), b1(1 * 3 * 8 * 4, 1.0f), b3(3 * 3 * 8 * 4, 1.0f);
  const auto mm = message_of([&] { batched(s, ctg::feed<A>(a1, 1), ctg::feed<B>(b3, 3)); });
  CHECK(mm.find("shape mismatch at run time in matmul batch dims") != std::string::npos);
  CHECK(mm.find("never broadcasts") != std::string::npos);
  CHECK(mm.find("it reads 'a' fed [1, 1, 2, 8], 'b' fed [3, 3, 8, 4]") != std::string::npos);
  CHECK(message_of([&] { batched(s, ctg::feed<A>(a3, 3), ctg::feed<B>(b1, 1)); }).find("matmul batch dims") !=
        std::string::npos);
  // Its static 1 (dim 1 of A against B's 3) stretches: 3 batches of 3.
  CHECK(batched(s, ctg::feed<A>(a3, 3), ctg::feed<B>(b3, 3)) == doctest::Approx(3 * 3 * 2 * 4 * 8));
}

TEST_CASE("a size that overflows is reported, not wrapped") {
  fixture f;
  const ctg::dim_t huge = std::numeric_limits<ctg::dim_t>::max() / 4;
  const auto m = message_of([&] { f.step(f.store, ctg::feed<X>(f.x, huge), ctg::feed<Y>(f.y, huge)); });
  CHECK(m.find("overflows") != std::string::npos);
  CHECK(m.find("'x'") != std::string::npos);
  // Elements that fit, bytes that do not: [2^31, 0] @ [0, 2^31] is 2^62
  // floats, 2^64 bytes. (They wrapped to a 64-byte buffer: a crash.)
  using A = ctg::input<"a", ctg::f32, ctg::dyn, ctg::dyn>;
  using B = ctg::input<"b", ctg::f32, ctg::dyn, ctg::dyn>;
  auto product = ctg::forward(ctg::matmul(A{}, B{}));
  auto s = ctg::make_store(f.dev, product);
  const std::vector<float> none;
  const ctg::dim_t n = ctg::dim_t{1} << 31;
  const auto bytes = message_of([&] { product(s, ctg::feed<A>(none, n, 0), ctg::feed<B>(none, 0, n)); });
  CHECK(bytes.find("ctg: size overflows: a buffer of 4611686018427387904 elements of 4 bytes") != std::string::npos);
  // No elements, dims whose product overflows: a 0 first hid it from the
  // check, and strides computed from the others overflowed (UB).
  using X3 = ctg::input<"x3", ctg::f32, ctg::dyn, ctg::dyn, ctg::dyn>;
  auto total = ctg::forward(ctg::sum(X3{}));
  auto st = ctg::make_store(f.dev, total);
  const ctg::dim_t d = ctg::dim_t{1} << 40;
  CHECK(message_of([&] { total(st, ctg::feed<X3>(none, 0, d, d)); }) ==
        "ctg: size overflows in input 'x3': dims [0, 1099511627776, 1099511627776]");
  CHECK(total(st, ctg::feed<X3>(none, 0, 3, 5)) == 0.0f);  // (an empty input that fits is a sum of 0)
  // Negative sizes are named as such (-2 x -2 has 4 elements: a size check
  // alone took it, and the buffers' sizes threw std::length_error).
  const std::vector<float> four(4, 1.0f);
  using X2 = ctg::input<"x2", ctg::f32, ctg::dyn, ctg::dyn>;
  auto sum2 = ctg::forward(ctg::sum(X2{}));
  auto s2 = ctg::make_store(f.dev, sum2);
  CHECK(message_of([&] { sum2(s2, ctg::feed<X2>(four, -2, -2)); }) == "ctg: negative size in input 'x2' dims [-2, -2]");
  CHECK(message_of([&] { sum2(s2, ctg::feed<X2>(four, -1, 4)); }) == "ctg: negative size in input 'x2' dims [-1, 4]");
  CHECK(sum2(s2, ctg::feed<X2>(four, 2, 2)) == 4.0f);
}

TEST_CASE("a causal mask over rows or columns of 2^31 is reported (it compares them as i32)") {
  using S = ctg::input<"s", ctg::f32, ctg::dyn, ctg::dyn>;
  auto masked = ctg::forward(ctg::sum(ctg::causal_mask(S{})));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, masked);
  const std::vector<float> none;
  const ctg::dim_t n = ctg::dim_t{1} << 31;
  for (const auto& [rows, cols] : {std::pair{ctg::dim_t{0}, n}, std::pair{n, ctg::dim_t{0}}}) {
    const std::string m = message_of([&] { masked(st, ctg::feed<S>(none, rows, cols)); });
    INFO(m);
    CHECK(m.rfind("ctg: causal_mask and one_hot take rows and columns below 2^31: dims [" + std::to_string(rows) + ", " +
                      std::to_string(cols) + "]",
                  0) == 0);
    CHECK(m.find("'s'") != std::string::npos);
  }
  CHECK(masked(st, ctg::feed<S>(none, 0, n - 1)) == 0.0f);  // (below 2^31: an empty sum)
  CHECK(masked(st, ctg::feed<S>(none, n - 1, 0)) == 0.0f);
  const std::vector<float> x = {1, 2, 3, 4};  // [[1, -inf], [3, 4]]
  CHECK(std::isinf(masked(st, ctg::feed<S>(x, 2, 2))));
}

TEST_CASE("a non-finite loss throws when checking is on, and writes nothing") {
  fixture f;
  f.good_step();
  const auto g = f.grads();
  f.store.check_finite(true);
  std::vector<float> bad = f.x;
  bad[3] = std::numeric_limits<float>::infinity();
  const auto m = message_of([&] { f.step(f.store, ctg::feed<X>(bad, 2), ctg::feed<Y>(f.y, 2)); });
  CHECK(m.find("not finite") != std::string::npos);
  CHECK(f.grads() == g);
  // With checking off the same step goes through.
  f.store.check_finite(false);
  CHECK_FALSE(std::isfinite(f.step(f.store, ctg::feed<X>(bad, 2), ctg::feed<Y>(f.y, 2))));
}

TEST_CASE("check_finite checks every element of a step's output, not its first only") {
  fixture f;
  using X6 = ctg::input<"x6", ctg::f32, ctg::dyn, 8>;
  auto product = ctg::forward(ctg::matmul(X6{}, W{}));  // (40 x 4 outputs)
  auto s = ctg::make_store(f.dev, product);
  ctg::nn::init_params(s, 3);
  s.check_finite(true);
  std::vector<float> x(40 * 8, 0.5f);
  product(s, ctg::feed<X6>(x, 40));
  const std::vector<float> good(s.value().begin(), s.value().end());
  x.back() = std::numeric_limits<float>::quiet_NaN();  // (the last row's outputs only)
  const auto m = message_of([&] { product(s, ctg::feed<X6>(x, 40)); });
  CHECK(m.find("not finite") != std::string::npos);
  CHECK(std::vector<float>(s.value().begin(), s.value().end()) == good);  // (the last good value stays)
}

TEST_CASE("after errors the store still runs correct steps") {
  fixture f;
  const float a = f.good_step();
  const std::vector<float> short_x(3, 1.0f);
  (void)message_of([&] { f.step(f.store, ctg::feed<X>(short_x, 2), ctg::feed<Y>(f.y, 2)); });
  CHECK(f.good_step() == a);
}

TEST_CASE("a cross-entropy target outside the classes names the input, position and value, and writes nothing") {
  using Xc = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
  using T = ctg::input<"targets", ctg::i32, ctg::dyn>;
  using Wc = ctg::param<"w", ctg::f32, 8, 4>;
  auto step = ctg::value_and_grad(ctg::nn::cross_entropy(ctg::matmul(Xc{}, Wc{}), T{}), ctg::wrt<Wc>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  auto w = store.param<Wc>();
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(i);
  const std::vector<float> x(3 * 8, 0.5f);
  std::vector<ctg::i32> t{0, 3, -100};  // -100: the ignored index
  const float good = step(store, ctg::feed<Xc>(x, 3), ctg::feed<T>(t, 3));
  const std::vector<float> g(store.grad<Wc>().begin(), store.grad<Wc>().end());
  for (ctg::i32 bad : {4, -1, 31}) {
    t[1] = bad;
    const auto m = message_of([&] { step(store, ctg::feed<Xc>(x, 3), ctg::feed<T>(t, 3)); });
    CHECK(m.find("index " + std::to_string(bad) + " at position 1 of input 'targets' is outside the 4 classes") !=
          std::string::npos);
    CHECK(std::vector<float>(store.grad<Wc>().begin(), store.grad<Wc>().end()) == g);
    CHECK(store.value()[0] == good);
  }
}

// A table of ctg::dyn rows (fed, or computed from a fed input) has its
// count at run time: an id outside it is the same error (it was not
// checked at all, and gather read outside the table).
TEST_CASE("gather from a table of dyn rows checks its ids against the rows fed") {
  using Tab = ctg::input<"tab", ctg::f32, ctg::dyn, 4>;
  using Ids = ctg::input<"ids", ctg::i32, ctg::dyn>;
  using Wg = ctg::param<"w", ctg::f32, 4>;
  auto fed = ctg::value_and_grad(ctg::sum(ctg::gather(Tab{}, Ids{}) * Wg{}), ctg::wrt<Wg>);
  auto computed = ctg::value_and_grad(ctg::sum(ctg::gather(ctg::exp(Tab{}), Ids{}) * Wg{}), ctg::wrt<Wg>);
  ctg::cpu::device dev;
  auto a = ctg::make_store(dev, fed);
  auto b = ctg::make_store(dev, computed);
  for (auto& v : a.param<Wg>()) v = 1.0f;
  for (auto& v : b.param<Wg>()) v = 1.0f;
  const std::vector<float> table{1, 1, 1, 1, 2, 2, 2, 2};  // 2 rows
  std::vector<ctg::i32> ids{0, 1};
  const float good_a = fed(a, ctg::feed<Tab>(table, 2), ctg::feed<Ids>(ids, 2));
  const float good_b = computed(b, ctg::feed<Tab>(table, 2), ctg::feed<Ids>(ids, 2));
  for (ctg::i32 bad : {2, -1, 1000}) {
    ids[1] = bad;
    const std::string expected = "index " + std::to_string(bad) + " at position 1 of input 'ids' is outside the 2 rows";
    const auto ma = message_of([&] { fed(a, ctg::feed<Tab>(table, 2), ctg::feed<Ids>(ids, 2)); });
    CHECK(ma.find(expected + " of 'tab'") != std::string::npos);
    const auto mb = message_of([&] { computed(b, ctg::feed<Tab>(table, 2), ctg::feed<Ids>(ids, 2)); });
    CHECK(mb.find(expected + " of a table") != std::string::npos);
    CHECK(a.value()[0] == good_a);
    CHECK(b.value()[0] == good_b);
  }
  // Fed 3 rows, id 2 is in range.
  const std::vector<float> three{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
  ids[1] = 2;
  CHECK_NOTHROW(fed(a, ctg::feed<Tab>(three, 3), ctg::feed<Ids>(ids, 2)));
}

// A ctg::dyn dim against a static one in broadcast_to<S> and sum_to<S> is
// checked at run time, as in an elementwise op: fed 5 rows against 3, the
// first 3 were used (broadcast_to) or a buffer overrun (sum_to); fed 1, it
// stretched. In a step without gradient, where no backward caught it.
TEST_CASE("broadcast_to and sum_to of a dyn dim to a static one: the sizes must agree at run time") {
  using Xd = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
  auto stretch = ctg::forward(ctg::sum(ctg::broadcast_to<ctg::shape<3, 4>>(Xd{})));
  auto reduce = ctg::forward(ctg::sum(ctg::sum_to<ctg::shape<3, 4>>(Xd{})));
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, stretch);
  auto r = ctg::make_store(dev, reduce);
  std::vector<float> x(20);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  auto rows = [&](int n) { return ctg::feed<Xd>(std::span<const float>(x.data(), 4 * static_cast<std::size_t>(n)), n); };
  CHECK(stretch(s, rows(3)) == 78.0f);
  CHECK(reduce(r, rows(3)) == 78.0f);
  for (int n : {1, 5}) {
    CAPTURE(n);
    const std::string dims = "[" + std::to_string(n) + ", 4] to [3, 4]";
    CHECK(message_of([&] { stretch(s, rows(n)); }).find("ctg: shape mismatch at run time in broadcast_to: " + dims) !=
          std::string::npos);
    CHECK(message_of([&] { reduce(r, rows(n)); }).find("ctg: shape mismatch at run time in a reduction: " + dims) !=
          std::string::npos);
    CHECK(s.value()[0] == 78.0f);
    CHECK(r.value()[0] == 78.0f);
  }
}

// A max over no element is an error, as PyTorch's ("Expected reduction dim
// to have non-zero size"); it gave -inf. An empty result (no rows) is not.
TEST_CASE("max over an empty axis is a ctg::error; over the rows of an empty batch it is empty") {
  using Xe = ctg::input<"x", ctg::f32, 3, ctg::dyn>;
  using Xr = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
  auto row_max = ctg::forward(ctg::max<1>(Xe{}));
  auto all_max = ctg::forward(ctg::max(Xr{}));
  auto rows_max = ctg::forward(ctg::max<1>(Xr{}));
  ctg::cpu::device dev;
  auto a = ctg::make_store(dev, row_max);
  auto b = ctg::make_store(dev, all_max);
  auto c = ctg::make_store(dev, rows_max);
  const std::vector<float> none;
  CHECK(message_of([&] { row_max(a, ctg::feed<Xe>(none, 0)); }).find("ctg: max over an empty axis: [3, 0] to [3, 1]") !=
        std::string::npos);
  CHECK(message_of([&] { all_max(b, ctg::feed<Xr>(none, 0)); }).find("ctg: max over an empty axis") !=
        std::string::npos);
  rows_max(c, ctg::feed<Xr>(none, 0));
  CHECK(c.value_count() == 0);
  // A max read only for no element (a softmax over an empty axis reads its
  // max for each of its no elements) is no error: the softmax is empty, as
  // PyTorch's. (It was "max over an empty axis".) Read for an element, it is.
  auto softmax_rows = ctg::forward(ctg::softmax<0>(Xr{}));
  auto d = ctg::make_store(dev, softmax_rows);
  softmax_rows(d, ctg::feed<Xr>(none, 0));
  CHECK(d.value_count() == 0);
  auto sum_of_max = ctg::forward(ctg::sum(ctg::max<0>(Xr{})));
  auto e = ctg::make_store(dev, sum_of_max);
  CHECK(message_of([&] { sum_of_max(e, ctg::feed<Xr>(none, 0)); })
            .find("ctg: max over an empty axis: [0, 4] to [1, 4] (the max of no element is undefined; a sum is 0, "
                  "a mean NaN); it reads 'x' fed [0, 4]") != std::string::npos);
}

// init_params with a standard deviation that is not a finite number >= 0 is
// an error that changes nothing (NaN filled every parameter with NaN).
TEST_CASE("init_params rejects a NaN, infinite or negative standard deviation") {
  using Wi = ctg::param<"w", ctg::f32, 4, 3>;
  using Xi = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
  auto step = ctg::value_and_grad(ctg::sum(ctg::matmul(Xi{}, Wi{})));
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  ctg::nn::init_params(s, 1);
  const std::vector<float> before(s.param<Wi>().begin(), s.param<Wi>().end());
  for (double bad : {std::nan(""), HUGE_VAL, -1.0}) {
    CAPTURE(bad);
    CHECK(message_of([&] { ctg::nn::init_params(s, 2, bad); }).find("ctg: init_params: the standard deviation") !=
          std::string::npos);
    CHECK(std::vector<float>(s.param<Wi>().begin(), s.param<Wi>().end()) == before);
  }
  ctg::nn::init_params(s, 2, 0.0);  // zero is a valid deviation: every weight 0
  for (float v : s.param<Wi>()) CHECK(v == 0.0f);
}
