// The transformer model: every parameter's gradient against finite
// differences (f64 policy), and a stack whose type does not depend on the
// number of layers.
#include "nn_model_common.hpp"

using namespace nn_model;

TEST_CASE("transformer (f64 policy, stacked blocks): every parameter's gradient matches finite differences") {
  using M = ctg::nn::transformer<small_config, ctg::precision::full<ctg::f64>>;
  auto loss = M::loss(Ids{}, Pos{}, Tg{});
  static_assert(std::is_same_v<ctg::dtype_t<decltype(loss)>, ctg::f64>);
  using params = ctg::params_t<decltype(loss)>;
  // tok, pos, 9 stacked block leaves, ln_f, lm_head
  static_assert(params::size == 13);
  using WQ = ctg::param<"layers.{i}.attn.wq", ctg::f64, 2, 6, 4>;
  static_assert(ctg::has_grad_path_v<decltype(loss), WQ>);
  auto step = ctg::value_and_grad(loss);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  ctg::nn::init_params(st, 1, 0.5);  // large weights: non-trivial attention patterns
  gc::rng rng(2);
  for (auto& s : st.param<ctg::param<"layers.{i}.ln1.scale", ctg::f64, 2, 4>>()) s = rng.uniform(0.5, 1.5);
  const double l = run(step, st);
  CHECK(std::isfinite(l));
  check_all_grads(step, st);
}

TEST_CASE("a stack's type, and its compiled graphs, do not depend on the number of layers") {
  using M2 = ctg::nn::transformer<small_config, ctg::precision::full<ctg::f32>>;
  using M4 = ctg::nn::transformer<four_layers, ctg::precision::full<ctg::f32>>;
  using L2 = decltype(M2::loss(Ids{}, Pos{}, Tg{}));
  using L4 = decltype(M4::loss(Ids{}, Pos{}, Tg{}));
  static_assert(ctg::topo_t<ctg::tl::list<L2>>::size == ctg::topo_t<ctg::tl::list<L4>>::size);
  static_assert(ctg::group_count_v<decltype(ctg::value_and_grad(L2{}))> ==
                ctg::group_count_v<decltype(ctg::value_and_grad(L4{}))>);
  // the stacked leaves carry the layer count as their leading dim
  static_assert(ctg::tl::contains<ctg::param<"layers.{i}.mlp.w2", ctg::f32, 4, 6, 4>, ctg::params_t<L4>>::value);
}

// (Keyed without the name, every leaf of a shape got the same values: wq == wk.)
TEST_CASE("init_params: leaves of one shape get different values (keyed by name), N(0, std)") {
  using Wq = ctg::param<"attn.wq", ctg::f32, 16, 16>;
  using Wk = ctg::param<"attn.wk", ctg::f32, 16, 16>;
  using S = ctg::param<"ln.scale", ctg::f32, 16>;
  using Bb = ctg::param<"lin.bias", ctg::f32, 16>;
  auto fwd = ctg::forward(ctg::sum(Wq{}) + ctg::sum(Wk{}) + ctg::sum(S{}) + ctg::sum(Bb{}));
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, fwd);
  ctg::nn::init_params(s, 5, 0.02);
  const auto q = s.param<Wq>(), k = s.param<Wk>();
  std::size_t same = 0;
  double sq = 0;
  for (std::size_t i = 0; i < q.size(); ++i) {
    same += q[i] == k[i];
    sq += static_cast<double>(q[i]) * q[i];
  }
  CHECK(same == 0);
  const double sd = std::sqrt(sq / static_cast<double>(q.size()));
  CHECK(sd > 0.015);
  CHECK(sd < 0.025);
  for (float v : s.param<S>()) CHECK(v == 1.0f);
  for (float v : s.param<Bb>()) CHECK(v == 0.0f);
}

namespace norm_eps {
using P = ctg::precision::full<ctg::f64>;
using X = ctg::frozen<"x", ctg::f64, 2, 4>;
using S = ctg::frozen<"s", ctg::f64, 4>;
using B = ctg::frozen<"b", ctg::f64, 4>;
}  // namespace norm_eps

// Norms' eps against their formulas in double (only the PyTorch oracle
// pinned it, within its tolerance): a constant row gives layer_norm's bias,
// a zero row rms_norm's 0, finite.
TEST_CASE("layer_norm: eps inside the sqrt (a constant row gives the bias; a small-variance row, the formula)") {
  using namespace norm_eps;
  auto fwd = ctg::forward(ctg::nn::layer_norm<P, 1e-5>(X{}, S{}, B{}));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, fwd);
  const std::vector<double> x{2.0, 2.0, 2.0, 2.0, 1.0, 1.001, 0.999, 1.0005};
  const std::vector<double> s{1.5, -0.5, 2.0, 1.0}, b{0.1, 0.2, 0.3, 0.4};
  std::copy(x.begin(), x.end(), st.param<X>().begin());
  std::copy(s.begin(), s.end(), st.param<S>().begin());
  std::copy(b.begin(), b.end(), st.param<B>().begin());
  fwd(st);
  const auto y = st.value();
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < 4; ++j) mean += x[r * 4 + j] / 4;
    for (int j = 0; j < 4; ++j) var += (x[r * 4 + j] - mean) * (x[r * 4 + j] - mean) / 4;
    for (int j = 0; j < 4; ++j) {
      const double want = (x[r * 4 + j] - mean) / std::sqrt(var + 1e-5) * s[j] + b[j];
      CAPTURE(r);
      CAPTURE(j);
      CHECK(std::isfinite(static_cast<double>(y[r * 4 + j])));
      CHECK(y[r * 4 + j] == doctest::Approx(want).epsilon(1e-9));
    }
  }
}

TEST_CASE("rms_norm: eps inside the sqrt (a zero row gives 0; a small row, the formula)") {
  using namespace norm_eps;
  auto fwd = ctg::forward(ctg::nn::rms_norm<P, 1e-5>(X{}, S{}));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, fwd);
  const std::vector<double> x{0.0, 0.0, 0.0, 0.0, 1e-3, -2e-3, 3e-3, 0.5e-3};
  const std::vector<double> s{1.5, -0.5, 2.0, 1.0};
  std::copy(x.begin(), x.end(), st.param<X>().begin());
  std::copy(s.begin(), s.end(), st.param<S>().begin());
  fwd(st);
  const auto y = st.value();
  for (int r = 0; r < 2; ++r) {
    double ms = 0;
    for (int j = 0; j < 4; ++j) ms += x[r * 4 + j] * x[r * 4 + j] / 4;
    for (int j = 0; j < 4; ++j) {
      CAPTURE(r);
      CAPTURE(j);
      const double want = x[r * 4 + j] / std::sqrt(ms + 1e-5) * s[j];
      CHECK(std::isfinite(static_cast<double>(y[r * 4 + j])));
      CHECK(y[r * 4 + j] == doctest::Approx(want).epsilon(1e-9));
    }
  }
}
