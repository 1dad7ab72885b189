// Fused causal attention (graph/attention.hpp) on the CPU: its output
// against a reference computed here in double, its gradients against
// central finite differences (f64) and against the composed expression
// softmax(causal_mask(q k^T / sqrt(Dh))) v (f32, bf16), both layouts, a
// sequence length known only at run time, and what it keeps for backward.
#include <cmath>

#include "grad_check.hpp"

namespace {
constexpr std::size_t B = 2, H = 3, T = 5, D = 4;  // batch, heads, tokens, head dim

// o[b, h, i, :] = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D)) v_j, token_rows [B, H, T, D].
std::vector<double> reference(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, std::size_t heads, std::size_t t_len) {
  std::vector<double> o(q.size());
  const double scale = 1.0 / std::sqrt(double(D));
  for (std::size_t h = 0; h < heads; ++h) {
    const std::size_t base = h * t_len * D;
    for (std::size_t i = 0; i < t_len; ++i) {
      std::vector<double> s(i + 1);
      double m = -INFINITY, sum = 0;
      for (std::size_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (std::size_t d = 0; d < D; ++d) dot += q[base + i * D + d] * k[base + j * D + d];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      for (std::size_t j = 0; j <= i; ++j) sum += std::exp(s[j] - m);
      for (std::size_t d = 0; d < D; ++d) {
        double acc = 0;
        for (std::size_t j = 0; j <= i; ++j) acc += std::exp(s[j] - m) / sum * v[base + j * D + d];
        o[base + i * D + d] = acc;
      }
    }
  }
  return o;
}

// [.., T, D] <-> [.., D, T] for every head.
std::vector<double> heads_transposed(const std::vector<double>& x, std::size_t rows, std::size_t cols) {
  std::vector<double> y(x.size());
  for (std::size_t h = 0; h < x.size() / (rows * cols); ++h)
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) y[h * rows * cols + c * rows + r] = x[h * rows * cols + r * cols + c];
  return y;
}

template <class T_>
using leaf_q = ctg::param<"q", T_, B, H, T, D>;
template <class T_>
using leaf_k = ctg::param<"k", T_, B, H, T, D>;
template <class T_>
using leaf_v = ctg::param<"v", T_, B, H, T, D>;
template <class T_>
using leaf_r = ctg::frozen<"r", T_, B, H, T, D>;

// The composed attention nn::causal_self_attention wrote before it fused (f32 scores, softmax, product).
template <class Q, class K, class V>
auto composed(Q q, K k, V v) {
  using C = ctg::compute_t<typename Q::dtype>;
  auto scores = ctg::cast<C>(ctg::matmul(q, ctg::transpose(k))) * ctg::lit<0.5>;  // 1 / sqrt(4)
  return ctg::matmul(ctg::cast<typename Q::dtype>(ctg::softmax(ctg::causal_mask(scores))), v);
}

// Two steps of the loss sum(attention(q, k, v) * r), the fused and a
// composed one, fed the same random q, k (in +-qk), v and r: the loss
// within (rtol, loss_atol), each gradient within (rtol, grad_atol).
struct tolerance {
  double rtol, loss_atol, grad_atol;
};
template <class Q, class K, class V, class R, class Fused, class Plain>
void check_fused_as_composed(Fused fused, Plain plain, std::uint64_t seed, double qk, tolerance tol) {
  gc::rng rng(seed);
  ctg::cpu::device dev;
  auto fs = ctg::make_store(dev, fused);
  auto ps = ctg::make_store(dev, plain);
  const std::size_t n = Q::dims::static_numel;
  const auto q = rng.vec(n, -qk, qk), k = rng.vec(n, -qk, qk), v = rng.vec(n, -1.0, 1.0), r = rng.vec(n, -1.0, 1.0);
  gc::set<Q>(fs, q), gc::set<K>(fs, k), gc::set<V>(fs, v), gc::set<R>(fs, r);
  gc::set<Q>(ps, q), gc::set<K>(ps, k), gc::set<V>(ps, v), gc::set<R>(ps, r);
  fused(fs);
  plain(ps);
  gc::check_close({gc::last_loss(fs)}, {gc::last_loss(ps)}, tol.rtol, tol.loss_atol, "loss");
  gc::check_close(gc::to_vec(fs.template grad<Q>()), gc::to_vec(ps.template grad<Q>()), tol.rtol, tol.grad_atol, "dq");
  gc::check_close(gc::to_vec(fs.template grad<K>()), gc::to_vec(ps.template grad<K>()), tol.rtol, tol.grad_atol, "dk");
  gc::check_close(gc::to_vec(fs.template grad<V>()), gc::to_vec(ps.template grad<V>()), tol.rtol, tol.grad_atol, "dv");
}
}  // namespace

TEST_CASE("causal_attention: value against a reference in double, gradients against finite differences (f64)") {
  using Q = leaf_q<double>;
  using K = leaf_k<double>;
  using V = leaf_v<double>;
  using R = leaf_r<double>;
  gc::rng rng(71);
  ctg::cpu::device dev;
  auto att = ctg::causal_attention(Q{}, K{}, V{});
  static_assert(std::is_same_v<ctg::shape_t<decltype(att)>, ctg::shape<B, H, T, D>>);
  auto fwd = ctg::forward(att);
  auto fs = ctg::make_store(dev, fwd);
  const auto q = gc::set<Q>(fs, rng.vec(B * H * T * D, -2.0, 2.0));
  const auto k = gc::set<K>(fs, rng.vec(B * H * T * D, -2.0, 2.0));
  const auto v = gc::set<V>(fs, rng.vec(B * H * T * D, -1.0, 1.0));
  gc::check_close(gc::run_forward(fwd, fs), reference(q, k, v, B * H, T), 1e-13, 1e-15, "attention output");

  auto step = ctg::value_and_grad(ctg::sum(att * R{}), ctg::wrt<Q, K, V>);
  // Three groups of their own: lse, the output, the gradients (dq, dk, dv: views of one buffer).
  static_assert(ctg::count_groups<decltype(step)>(ctg::group_kind::attention) == 3);
  auto st = ctg::make_store(dev, step);
  gc::set<Q>(st, q);
  gc::set<K>(st, k);
  gc::set<V>(st, v);
  gc::set<R>(st, rng.vec(B * H * T * D, -1.0, 1.0));
  gc::check_grad<Q>(step, st, gc::f64_tol);
  gc::check_grad<K>(step, st, gc::f64_tol);
  gc::check_grad<V>(step, st, gc::f64_tol);
}

TEST_CASE("causal_attention, feature_rows: each head's values transposed, the same attention") {
  using Qt = ctg::param<"q", double, B, H, D, T>;
  using Kt = ctg::param<"k", double, B, H, D, T>;
  using Vt = ctg::param<"v", double, B, H, D, T>;
  using Rt = ctg::frozen<"r", double, B, H, D, T>;
  gc::rng rng(72);
  ctg::cpu::device dev;
  constexpr auto rows = ctg::attention_layout::feature_rows;
  auto att = ctg::causal_attention<rows>(Qt{}, Kt{}, Vt{});
  auto fwd = ctg::forward(att);
  auto fs = ctg::make_store(dev, fwd);
  const auto q = gc::set<Qt>(fs, rng.vec(B * H * T * D, -2.0, 2.0));
  const auto k = gc::set<Kt>(fs, rng.vec(B * H * T * D, -2.0, 2.0));
  const auto v = gc::set<Vt>(fs, rng.vec(B * H * T * D, -1.0, 1.0));
  const auto want = reference(heads_transposed(q, D, T), heads_transposed(k, D, T), heads_transposed(v, D, T), B * H, T);
  gc::check_close(gc::run_forward(fwd, fs), heads_transposed(want, T, D), 1e-13, 1e-15, "attention output");

  auto step = ctg::value_and_grad(ctg::sum(att * Rt{}), ctg::wrt<Qt, Kt, Vt>);
  auto st = ctg::make_store(dev, step);
  gc::set<Qt>(st, q);
  gc::set<Kt>(st, k);
  gc::set<Vt>(st, v);
  gc::set<Rt>(st, rng.vec(B * H * T * D, -1.0, 1.0));
  gc::check_grad<Qt>(step, st, gc::f64_tol);
  gc::check_grad<Kt>(step, st, gc::f64_tol);
  gc::check_grad<Vt>(step, st, gc::f64_tol);
}

TEST_CASE_TEMPLATE("causal_attention against the composed attention: value and gradients (f32, bf16)", T_, float,
                   ctg::bf16) {
  using Q = leaf_q<T_>;
  using K = leaf_k<T_>;
  using V = leaf_v<T_>;
  using R = leaf_r<T_>;
  auto fused = ctg::value_and_grad(ctg::sum(ctg::cast<float>(ctg::causal_attention(Q{}, K{}, V{}) * R{})),
                                   ctg::wrt<Q, K, V>);
  auto plain = ctg::value_and_grad(ctg::sum(ctg::cast<float>(composed(Q{}, K{}, V{}) * R{})), ctg::wrt<Q, K, V>);
  // f32: both sum in f32 in other orders. bf16: both round the probabilities (and the fused one ds) to bf16
  // before their products, the composed one its scores too; each rounds its gradients once to bf16.
  const double rtol = std::is_same_v<T_, float> ? 1e-5 : 2e-2, atol = std::is_same_v<T_, float> ? 1e-6 : 2e-2;
  check_fused_as_composed<Q, K, V, R>(fused, plain, 73, 2.0, {rtol, atol, atol});
}

TEST_CASE("causal_attention over a sequence known at run time; mismatched q, k, v are an error") {
  // q = x Wq, k = x Wk, v = x Wv: [batch, T, D] token rows, T fed at run time (3, then 7).
  using X = ctg::input<"x", double, ctg::dyn, ctg::dyn, 6>;
  using Y = ctg::input<"y", double, ctg::dyn, ctg::dyn, 6>;
  using Wq = ctg::param<"wq", double, 6, D>;
  using Wk = ctg::param<"wk", double, 6, D>;
  using Wv = ctg::param<"wv", double, 6, D>;
  gc::rng rng(74);
  ctg::cpu::device dev;
  auto att = ctg::causal_attention(ctg::matmul(X{}, Wq{}), ctg::matmul(X{}, Wk{}), ctg::matmul(X{}, Wv{}));
  auto step = ctg::value_and_grad(ctg::sum(ctg::square(att)), ctg::wrt<Wq, Wk, Wv>);
  auto st = ctg::make_store(dev, step);
  const auto wq = gc::set<Wq>(st, rng.vec(6 * D, -1.0, 1.0));
  const auto wk = gc::set<Wk>(st, rng.vec(6 * D, -1.0, 1.0));
  const auto wv = gc::set<Wv>(st, rng.vec(6 * D, -1.0, 1.0));
  for (std::size_t t_len : {3u, 7u}) {
    const auto x = rng.vec(2 * t_len * 6, -1.0, 1.0);
    const auto feed = ctg::feed<X>(x, 2, t_len);
    gc::check_grad<Wq>(step, st, gc::f64_tol, feed);
    gc::check_grad<Wv>(step, st, gc::f64_tol, feed);
    // The value, from the same projections computed here.
    auto project = [&](const std::vector<double>& w) {
      std::vector<double> p(2 * t_len * D);
      for (std::size_t r = 0; r < 2 * t_len; ++r)
        for (std::size_t d = 0; d < D; ++d)
          for (std::size_t c = 0; c < 6; ++c) p[r * D + d] += x[r * 6 + c] * w[c * D + d];
      return p;
    };
    const auto o = reference(project(wq), project(wk), project(wv), 2, t_len);
    double want = 0;
    for (double e : o) want += e * e;
    gc::check_close({gc::last_loss(st)}, {want}, 1e-12, 1e-14, "loss");
  }
  // k from another input of another length: found when the shapes are.
  auto mixed = ctg::forward(ctg::causal_attention(ctg::matmul(X{}, Wq{}), ctg::matmul(Y{}, Wk{}), ctg::matmul(X{}, Wv{})));
  auto ms = ctg::make_store(dev, mixed);
  const std::vector<double> x(2 * 3 * 6, 0.5), y(2 * 4 * 6, 0.5);
  CHECK_THROWS_WITH_AS(mixed(ms, ctg::feed<X>(x, 2, 3), ctg::feed<Y>(y, 2, 4)),
                       doctest::Contains("ctg: shape mismatch at run time in causal_attention"), ctg::error);
}

TEST_CASE("feature rows of 256 tokens and more, in f32: the fused and the composed attention agree") {
  // Several blocks of 64 queries; the composed backward's products of 64
  // rows against >= 256 transposed columns run transposed (cpu::gemm's
  // gemm_computed_transposed; it once wrote every head's dq at the first
  // head's place).
  constexpr std::size_t b = 1, h = 2, d = 64, t = 260;
  using Q = ctg::param<"q", float, b, h, d, t>;
  using K = ctg::param<"k", float, b, h, d, t>;
  using V = ctg::param<"v", float, b, h, d, t>;
  using R = ctg::frozen<"r", float, b, h, d, t>;
  constexpr auto rows = ctg::attention_layout::feature_rows;
  auto fused = ctg::value_and_grad(ctg::sum(ctg::causal_attention<rows>(Q{}, K{}, V{}) * R{}), ctg::wrt<Q, K, V>);
  auto scores = ctg::matmul(ctg::transpose(Q{}), K{}) * ctg::lit<0.125>;  // [.., t, t]
  auto plain_out = ctg::matmul(V{}, ctg::transpose(ctg::softmax(ctg::causal_mask(scores))));  // [.., d, t]
  auto plain = ctg::value_and_grad(ctg::sum(plain_out * R{}), ctg::wrt<Q, K, V>);
  // Both in f32, their sums in other orders (of up to 260 terms).
  check_fused_as_composed<Q, K, V, R>(fused, plain, 75, 1.0, {1e-4, 1e-4, 1e-5});
}

TEST_CASE("f32 heads with large scores: the fused attention's gradients as accurate as the composed one's") {
  // q and k near 40 give scores near 6400 and lse as large: rounded to f32,
  // lse is off by up to 2^-24 of that, which scales every probability of
  // the row alike. The output once kept that factor (its row not divided
  // by the probabilities' sum), and then delta did, and the backward's ds
  // no longer summed to 0 over the row: dq and dk were 56x less accurate
  // than the composed attention's. Truth: the composed attention in f64.
  constexpr std::size_t h = 2, t = 256, d = 16;
  auto fused_step = [](auto q, auto k, auto v, auto r) {
    return ctg::value_and_grad(ctg::sum(ctg::causal_attention(q, k, v) * r), ctg::wrt<decltype(q), decltype(k)>);
  };
  auto composed_step = [](auto q, auto k, auto v, auto r) {
    auto scores = ctg::matmul(q, ctg::transpose(k)) * ctg::lit<0.25>;  // 1 / sqrt(16)
    auto out = ctg::matmul(ctg::softmax(ctg::causal_mask(scores)), v);
    return ctg::value_and_grad(ctg::sum(out * r), ctg::wrt<decltype(q), decltype(k)>);
  };
  using Q = ctg::param<"q", float, h, t, d>;
  using K = ctg::param<"k", float, h, t, d>;
  using V = ctg::param<"v", float, h, t, d>;
  using R = ctg::frozen<"r", float, h, t, d>;
  using Q64 = ctg::param<"q", double, h, t, d>;
  using K64 = ctg::param<"k", double, h, t, d>;
  using V64 = ctg::param<"v", double, h, t, d>;
  using R64 = ctg::frozen<"r", double, h, t, d>;
  gc::rng rng(77);
  const std::size_t n = h * t * d;
  auto near = [&](double centre) {
    auto x = rng.vec(n, -1.0, 1.0);
    for (double& e : x) e = static_cast<float>(centre + e);  // values f32 holds: every store gets the same
    return x;
  };
  const auto q = near(40), k = near(40), v = near(0), r = near(0);
  ctg::cpu::device dev;
  // A step's dq and dk from those values.
  auto grads = [&]<class Qs, class Ks, class Vs, class Rs>(auto step) {
    auto st = ctg::make_store(dev, step);
    gc::set<Qs>(st, q), gc::set<Ks>(st, k), gc::set<Vs>(st, v), gc::set<Rs>(st, r);
    step(st);
    return std::array{gc::to_vec(st.template grad<Qs>()), gc::to_vec(st.template grad<Ks>())};
  };
  const auto truth = grads.template operator()<Q64, K64, V64, R64>(composed_step(Q64{}, K64{}, V64{}, R64{}));
  const auto fused = grads.template operator()<Q, K, V, R>(fused_step(Q{}, K{}, V{}, R{}));
  const auto composed = grads.template operator()<Q, K, V, R>(composed_step(Q{}, K{}, V{}, R{}));
  for (std::size_t g = 0; g < 2; ++g) {
    double scale = 0, fused_error = 0, composed_error = 0;
    for (std::size_t i = 0; i < n; ++i) {
      scale = std::max(scale, std::abs(truth[g][i]));
      fused_error = std::max(fused_error, std::abs(fused[g][i] - truth[g][i]));
      composed_error = std::max(composed_error, std::abs(composed[g][i] - truth[g][i]));
    }
    INFO(std::string(g == 0 ? "dq" : "dk"), ": fused error ", fused_error / scale, ", composed ", composed_error / scale);
    CHECK(fused_error <= 2 * composed_error);
  }
}
