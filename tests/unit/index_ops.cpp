// Index tensors and views: gather (embedding) and its scatter-add gradient,
// one_hot, index_valid, causal_mask, reshape / unsqueeze / squeeze. Forward
// values against references computed here; gradients against central finite
// differences.
#include "grad_check.hpp"

#include <limits>

namespace {
using ctg::dyn;
using ctg::i32;
}  // namespace

TEST_CASE("views: unsqueeze / squeeze / reshape keep the elements and pass the gradient back") {
  using W = ctg::param<"w", ctg::f64, 2, 6>;
  using X = ctg::input<"x", ctg::f64, dyn, 6>;
  static_assert(std::is_same_v<ctg::shape_t<decltype(ctg::unsqueeze<1>(X{}))>, ctg::shape<dyn, 1, 6>>);
  static_assert(std::is_same_v<ctg::shape_t<decltype(ctg::unsqueeze<-1>(X{}))>, ctg::shape<dyn, 6, 1>>);
  static_assert(std::is_same_v<ctg::shape_t<decltype(ctg::squeeze<1>(ctg::unsqueeze<1>(X{})))>, ctg::shape<dyn, 6>>);
  static_assert(std::is_same_v<decltype(ctg::squeeze<1>(ctg::unsqueeze<1>(W{}))), W>);
  static_assert(std::is_same_v<ctg::shape_t<decltype(ctg::reshape<ctg::shape<3, 4>>(W{}))>, ctg::shape<3, 4>>);

  gc::rng rng(7);
  ctg::cpu::device dev;
  // A reshaped weight used in a broadcast product: the gradient must come back in W's layout.
  using R = ctg::frozen<"r", ctg::f64, 4>;
  auto loss = ctg::sum(ctg::square(ctg::reshape<ctg::shape<3, 4>>(W{}) * R{}));
  auto step = ctg::value_and_grad(loss, ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  const auto w = gc::set<W>(st, rng.vec(12, -2, 2));
  const auto r = gc::set<R>(st, rng.vec(4, -2, 2));
  const auto g = gc::check_grad<W>(step, st, gc::f64_tol);
  std::vector<double> want(12);
  for (std::size_t i = 0; i < 12; ++i) want[i] = 2 * w[i] * r[i % 4] * r[i % 4];
  gc::check_close(g, want, 1e-14, 0, "grad through reshape");

  // Batched matmul broadcasting over an unsqueezed dyn dim: [B,1,T,D] @ [H,D,E] -> [B,H,T,E].
  using Xb = ctg::input<"xb", ctg::f64, dyn, 3, 4>;
  using Wh = ctg::param<"wh", ctg::f64, 2, 4, 5>;
  auto heads = ctg::matmul(ctg::unsqueeze<1>(Xb{}), Wh{});
  static_assert(std::is_same_v<ctg::shape_t<decltype(heads)>, ctg::shape<dyn, 2, 3, 5>>);
  auto hstep = ctg::value_and_grad(ctg::sum(ctg::square(heads)), ctg::wrt<Wh>);
  auto hs = ctg::make_store(dev, hstep);
  gc::set<Wh>(hs, rng.vec(40, -1, 1));
  const auto xb = gc::data_of<double>(rng.vec(2 * 12, -1, 1));
  gc::check_grad<Wh>(hstep, hs, gc::f64_tol, ctg::feed<Xb>(xb, 2));
  CHECK_THROWS_WITH_AS(hstep(hs, ctg::feed<Xb>(std::span<const double>(xb.data(), 12), 2)),
                       doctest::Contains("expects 24 elements"), ctg::error);
}

// A reshape that merges dyn dims ([dyn, dyn, 4] to [dyn, 4]) on a path that
// needs a gradient: its rule splits the rows again at the sizes fed (it did
// not compile: reshape<[dyn, dyn, 4]> of [dyn, 4] cannot know the split).
TEST_CASE("the gradient of a reshape that merges dyn dims splits them at the fed sizes") {
  using X = ctg::input<"x", ctg::f64, dyn, dyn, 4>;
  using P = ctg::param<"p", ctg::f64, 4>;
  using R = ctg::frozen<"r", ctg::f64, 4>;
  auto rows = ctg::reshape<ctg::shape<dyn, 4>>(X{} * P{});
  auto step = ctg::value_and_grad(ctg::sum(ctg::square(rows) * R{}), ctg::wrt<P>);
  gc::rng rng(8);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  const auto p = gc::set<P>(st, rng.vec(4, -2, 2));
  const auto r = gc::set<R>(st, rng.vec(4, -2, 2));
  const auto x = gc::data_of<double>(rng.vec(2 * 3 * 4, -1, 1));
  const auto g = gc::check_grad<P>(step, st, gc::f64_tol, ctg::feed<X>(x, 2, 3));
  std::vector<double> want(4, 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) want[i % 4] += 2 * x[i] * x[i] * p[i % 4] * r[i % 4];
  gc::check_close(g, want, 1e-13, 0, "grad through the merging reshape");
}

TEST_CASE("gather: rows of a table by id; the gradient adds every use of a row (repeated ids)") {
  using E = ctg::param<"embed", ctg::f64, 5, 3>;
  using Ids = ctg::input<"ids", i32, dyn, 4>;
  static_assert(std::is_same_v<ctg::shape_t<decltype(ctg::gather(E{}, Ids{}))>, ctg::shape<dyn, 4, 3>>);
  static_assert(ctg::requires_grad_v<decltype(ctg::gather(E{}, Ids{}))>);
  using R = ctg::input<"r", ctg::f64, dyn, 4, 3>;
  auto loss = ctg::sum(ctg::gather(E{}, Ids{}) * R{});
  auto step = ctg::value_and_grad(loss, ctg::wrt<E>);
  gc::rng rng(11);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  const auto e = gc::set<E>(st, rng.vec(15, -1, 1));
  const std::vector<i32> ids{0, 3, 3, 1, 4, 3, 0, 0};  // row 3 three times, row 2 never
  const auto r = gc::data_of<double>(rng.vec(24, -1, 1));
  const double l = step(st, ctg::feed<Ids>(ids, 2), ctg::feed<R>(r, 2));
  double want_l = 0;
  std::vector<double> want_g(15, 0.0);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t k = 0; k < 3; ++k) {
      want_l += e[ids[i] * 3 + k] * r[i * 3 + k];
      want_g[ids[i] * 3 + k] += r[i * 3 + k];
    }
  CHECK(l == doctest::Approx(want_l).epsilon(1e-6));  // the loss comes back as float
  gc::check_close(gc::to_vec(st.grad<E>()), want_g, 1e-15, 0, "scatter-add gradient");
  gc::check_grad<E>(step, st, gc::f64_tol, ctg::feed<Ids>(ids, 2), ctg::feed<R>(r, 2));

  // An out-of-range id is a ctg::error naming the input and the table; nothing is written.
  const auto before = gc::to_vec(st.grad<E>());
  std::vector<i32> bad = ids;
  bad[5] = 5;
  CHECK_THROWS_WITH_AS(step(st, ctg::feed<Ids>(bad, 2), ctg::feed<R>(r, 2)),
                       doctest::Contains("index 5 at position 5 of input 'ids' is outside the 5 rows of 'embed'"),
                       ctg::error);
  bad[5] = -1;
  CHECK_THROWS_AS(step(st, ctg::feed<Ids>(bad, 2), ctg::feed<R>(r, 2)), ctg::error);
  CHECK(gc::to_vec(st.grad<E>()) == before);
}

TEST_CASE("gather of a bf16 table: the scatter-add accumulates in f32 and rounds once") {
  using E = ctg::param<"embed", ctg::bf16, 2, 1>;
  using Ids = ctg::input<"ids", i32, dyn>;
  using R = ctg::input<"r", ctg::f32, dyn, 1>;
  auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(ctg::gather(E{}, Ids{})) * R{}), ctg::wrt<E>);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  gc::set<E>(st, {1.0, 1.0});
  // 1 + 2^-9 added 256 times: each partial sum rounded to bf16 would stay at 256 + ...; f32 keeps it.
  const std::size_t n = 257;
  std::vector<i32> ids(n, 0);
  std::vector<float> r(n, 1.0f / 256.0f);
  r[0] = 1.0f;
  step(st, ctg::feed<Ids>(ids, n), ctg::feed<R>(r, n));
  // exact sum 1 + 256/256 = 2; f32 accumulation gives exactly 2.
  CHECK(gc::to_d(st.grad<E>()[0]) == 2.0);
  CHECK(gc::to_d(st.grad<E>()[1]) == 0.0);
}

TEST_CASE("one_hot and index_valid give the picked log-probability of a target (cross-entropy)") {
  using Z = ctg::param<"z", ctg::f64, 2, 3, 4>;
  using T = ctg::input<"t", i32, 2, 3>;
  auto oh = ctg::one_hot<4, -1>(T{});  // -1: the ignored target (a zero row)
  static_assert(std::is_same_v<ctg::shape_t<decltype(oh)>, ctg::shape<2, 3, 4>>);
  static_assert(std::is_same_v<ctg::dtype_t<decltype(oh)>, ctg::f32>);
  static_assert(!ctg::requires_grad_v<decltype(oh)>);
  auto valid = ctg::index_valid<-1>(ctg::unsqueeze<-1>(T{}));
  auto picked = ctg::sum<-1>(ctg::log_softmax(Z{}) * ctg::cast<ctg::f64>(oh));
  auto loss = -ctg::sum(picked * ctg::cast<ctg::f64>(valid)) / ctg::sum(ctg::cast<ctg::f64>(valid));
  auto step = ctg::value_and_grad(loss, ctg::wrt<Z>);
  gc::rng rng(5);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  const auto z = gc::set<Z>(st, rng.vec(24, -2, 2));
  const std::vector<i32> t{0, 3, -1, 2, 1, -1};
  step(st, ctg::feed<T>(t));
  double want = 0;
  int count = 0;
  for (std::size_t r = 0; r < 6; ++r) {
    if (t[r] < 0) continue;
    double m = -1e300, s = 0;
    for (std::size_t j = 0; j < 4; ++j) m = std::max(m, z[r * 4 + j]);
    for (std::size_t j = 0; j < 4; ++j) s += std::exp(z[r * 4 + j] - m);
    want += -(z[r * 4 + t[r]] - m - std::log(s));
    ++count;
  }
  want /= count;
  CHECK(gc::last_loss(st) == doctest::Approx(want).epsilon(1e-14));
  const auto g = gc::check_grad<Z>(step, st, gc::f64_tol, ctg::feed<T>(t));
  for (std::size_t j = 0; j < 4; ++j) CHECK(g[2 * 4 + j] == 0.0);  // an ignored row gets no gradient

  // one_hot alone, as a forward value: the ignored id gives a zero row; any
  // other id outside the classes is an error naming the input, position and value.
  auto fwd = ctg::forward(oh);
  auto fs = ctg::make_store(dev, fwd);
  std::vector<i32> t2{0, 3, -1, 2, 1, 1};
  const auto got = gc::run_forward(fwd, fs, ctg::feed<T>(t2));
  for (std::size_t r = 0; r < 6; ++r)
    for (std::size_t j = 0; j < 4; ++j) CHECK(got[r * 4 + j] == (t2[r] == static_cast<i32>(j) ? 1.0 : 0.0));
  t2[4] = 9;
  CHECK_THROWS_WITH_AS(gc::run_forward(fwd, fs, ctg::feed<T>(t2)),
                       doctest::Contains("index 9 at position 4 of input 't' is outside the 4 classes"), ctg::error);
  auto strict = ctg::forward(ctg::one_hot<4>(T{}));  // no ignored index: -1 is outside too
  auto ss = ctg::make_store(dev, strict);
  CHECK_THROWS_WITH_AS(gc::run_forward(strict, ss, ctg::feed<T>(t)),
                       doctest::Contains("index -1 at position 2 of input 't'"), ctg::error);
}

// An ignored index that is a class too (a padding id 0): its rows are
// ignored, as PyTorch's ignore_index=0 ignores them. (one_hot gave their
// class's 1: cross_entropy summed their losses over the others' count, and
// they got gradients.)
TEST_CASE("cross_entropy whose ignored index is a class: those rows add nothing, as PyTorch") {
  using L = ctg::param<"logits", ctg::f64, 4, 3>;
  using T = ctg::input<"t", i32, 4>;
  auto step = ctg::value_and_grad(ctg::nn::cross_entropy<0>(L{}, T{}), ctg::wrt<L>);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  const std::vector<double> z{0.3, -1.2, 0.8, 1.5, 0.1, -0.4, -0.7, 0.9, 0.2, 0.0, 0.6, -0.3};
  gc::set<L>(st, z);
  const std::vector<i32> t{2, 0, 1, 0};  // rows 1 and 3 ignored
  step(st, ctg::feed<T>(t));
  auto sum_exp = [&](std::size_t r) { return std::exp(z[r * 3]) + std::exp(z[r * 3 + 1]) + std::exp(z[r * 3 + 2]); };
  auto nll = [&](std::size_t r) { return std::log(sum_exp(r)) - z[r * 3 + static_cast<std::size_t>(t[r])]; };
  CHECK(gc::last_loss(st) == doctest::Approx((nll(0) + nll(2)) / 2).epsilon(1e-14));
  const auto g = gc::to_vec(st.grad<L>());
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t j = 0; j < 3; ++j) {
      const double want = t[r] == 0 ? 0.0
                                    : (std::exp(z[r * 3 + j]) / sum_exp(r) - (static_cast<i32>(j) == t[r] ? 1.0 : 0.0)) / 2;
      CHECK(g[r * 3 + j] == doctest::Approx(want).epsilon(1e-14).scale(1e-300));
    }
  // one_hot alone: the ignored class's rows are zero rows.
  auto fwd = ctg::forward(ctg::one_hot<3, 0>(T{}));
  auto fs = ctg::make_store(dev, fwd);
  const auto got = gc::run_forward(fwd, fs, ctg::feed<T>(t));
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t j = 0; j < 3; ++j)
      CHECK(got[r * 3 + j] == (t[r] != 0 && t[r] == static_cast<i32>(j) ? 1.0 : 0.0));
}

// A -inf logit (a masked class) that is not the target, and a -inf in an
// ignored row: PyTorch's loss is finite (the target's log-probability is
// picked, never multiplied by the one-hot's 0); ctg's was NaN (-inf * 0).
TEST_CASE("cross_entropy with -inf logits outside the targets: a finite loss, as PyTorch") {
  using L = ctg::param<"logits", ctg::f64, 3, 4>;
  using T = ctg::input<"t", i32, 3>;
  auto step = ctg::value_and_grad(ctg::nn::cross_entropy(L{}, T{}), ctg::wrt<L>);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> z{1, 2, -inf, 0.5, 0.1, 0.2, 0.3, 0.4, -inf, 1, 2, 3};
  gc::set<L>(st, z);
  const std::vector<i32> t{1, 3, -100};  // row 2 ignored
  step(st, ctg::feed<T>(t));
  auto nll = [&](std::size_t r) {
    double s = 0;
    for (std::size_t j = 0; j < 4; ++j) s += std::exp(z[r * 4 + j]);
    return std::log(s) - z[r * 4 + static_cast<std::size_t>(t[r])];
  };
  CHECK(gc::last_loss(st) == doctest::Approx((nll(0) + nll(1)) / 2).epsilon(1e-14));
  // d/dz = (softmax - one_hot) / 2 on the kept rows, 0 on the ignored one and at -inf.
  const auto g = gc::to_vec(st.grad<L>());
  for (std::size_t r = 0; r < 3; ++r) {
    double s = 0;
    for (std::size_t j = 0; j < 4; ++j) s += std::exp(z[r * 4 + j]);
    for (std::size_t j = 0; j < 4; ++j) {
      const double want =
          r == 2 ? 0.0 : (std::exp(z[r * 4 + j]) / s - (static_cast<i32>(j) == t[r] ? 1.0 : 0.0)) / 2;
      CHECK(g[r * 4 + j] == doctest::Approx(want).epsilon(1e-14).scale(1e-300));
    }
  }
}

TEST_CASE("causal_mask: -inf above the diagonal; softmax attends to the past only; gradient") {
  using S = ctg::param<"s", ctg::f64, 2, 4, 4>;
  using R = ctg::frozen<"r", ctg::f64, 2, 4, 4>;
  gc::rng rng(3);
  ctg::cpu::device dev;
  auto fwd = ctg::forward(ctg::causal_mask(S{}));
  auto fs = ctg::make_store(dev, fwd);
  const auto s = gc::set<S>(fs, rng.vec(32, -1, 1));
  const auto m = gc::run_forward(fwd, fs);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 4; ++j) {
        const std::size_t k = b * 16 + i * 4 + j;
        if (j <= i) CHECK(m[k] == s[k]);
        else CHECK(m[k] == -INFINITY);
      }
  auto step = ctg::value_and_grad(ctg::sum(ctg::softmax(ctg::causal_mask(S{})) * R{}), ctg::wrt<S>);
  auto st = ctg::make_store(dev, step);
  gc::set<S>(st, s);
  gc::set<R>(st, rng.vec(32, -1, 1));
  const auto g = gc::check_grad<S>(step, st, gc::f64_tol);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = i + 1; j < 4; ++j) CHECK(g[b * 16 + i * 4 + j] == 0.0);
  // The fused step agrees bit for bit with the unfused reference.
  auto ref = ctg::unfused(step);
  auto rs = ctg::make_store(dev, ref);
  gc::set<S>(rs, s);
  std::copy(st.param<R>().begin(), st.param<R>().end(), rs.param<R>().begin());
  step(st);
  ref(rs);
  CHECK(gc::to_vec(st.grad<S>()) == gc::to_vec(rs.grad<S>()));
}
