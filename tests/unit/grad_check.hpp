#pragma once
// Shared helpers of the ops_grad*.cpp tests: a fixed-seed generator, leaf
// initialisation, a central finite-difference gradient check, value checks
// against references computed here with <cmath>, and an independent bf16/f16
// rounding reference (written from the format definitions, not from ctg).
//
// The one gradient check:
//   auto step  = ctg::value_and_grad(loss, ctg::wrt<W>);
//   auto store = ctg::make_store(dev, step);
//   ... initialise store.param<...>() ...
//   gc::check_grad<W>(step, store, gc::f64_tol, feeds...);
// perturbs every element of W by +-eps (rounded to W's dtype; the step used is
// the difference actually stored), re-runs the step, and compares
// (L(w+h) - L(w-h)) / (2h) with store.grad<W>() of the unperturbed step.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <ctg/ctg.hpp>

namespace gc {

// ------------------------------------------------------------ conversions ---
template <class T>
double to_d(T v) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) return static_cast<double>(v);
  else return static_cast<double>(static_cast<float>(v));
}
template <class T>
T from_d(double v) {
  if constexpr (std::is_same_v<T, double>) return v;
  else if constexpr (std::is_same_v<T, float>) return static_cast<float>(v);
  else return T(static_cast<float>(v));
}
template <class T>
std::vector<double> to_vec(std::span<T> s) {
  std::vector<double> r(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) r[i] = to_d(s[i]);
  return r;
}

// Round-to-nearest-even to a binary format with `mant` explicit mantissa bits and
// minimum normal exponent `emin` (normal numbers and subnormals; no overflow handling:
// tests keep values small). Independent of ctg: uses std::ldexp / std::nearbyint.
inline double round_to_format(double x, int mant, int emin) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = std::ilogb(x);
  if (e < emin) e = emin;
  const double ulp = std::ldexp(1.0, e - mant);
  return std::nearbyint(x / ulp) * ulp;  // default rounding mode: to nearest, ties to even
}
inline double round_bf16(double x) { return round_to_format(static_cast<float>(x), 7, -126); }
inline double round_f16(double x) { return round_to_format(static_cast<float>(x), 10, -14); }

// -------------------------------------------------------------- generator ---
struct rng {
  std::mt19937_64 gen;
  explicit rng(std::uint64_t seed) : gen(seed) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  // |x| in [lo, hi], random sign: keeps relu/abs/division away from 0.
  double away_from_zero(double lo, double hi) {
    const double m = uniform(lo, hi);
    return std::bernoulli_distribution(0.5)(gen) ? m : -m;
  }
  std::vector<double> vec(std::size_t n, double lo, double hi) {
    std::vector<double> v(n);
    for (auto& x : v) x = uniform(lo, hi);
    return v;
  }
  std::vector<double> signed_vec(std::size_t n, double lo, double hi) {
    std::vector<double> v(n);
    for (auto& x : v) x = away_from_zero(lo, hi);
    return v;
  }
};

template <class L>
constexpr std::size_t numel() {
  std::size_t n = 1;
  for (auto d : L::dims::dims) n *= static_cast<std::size_t>(d);
  return n;
}

// Write `v` into stored leaf L (param or frozen), rounded to its dtype; returns the
// values actually stored (so references use exactly what the graph sees).
template <class L, class Store>
std::vector<double> set(Store& store, const std::vector<double>& v) {
  auto p = store.template param<L>();
  REQUIRE(p.size() == v.size());
  std::vector<double> stored(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    p[i] = from_d<typename L::dtype>(v[i]);
    stored[i] = to_d(p[i]);
  }
  return stored;
}

// Input data for ctg::feed, rounded to T.
template <class T>
std::vector<T> data_of(const std::vector<double>& v) {
  std::vector<T> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = from_d<T>(v[i]);
  return r;
}

// --------------------------------------------------------------- checking ---
struct tol {
  double eps;   // finite-difference half step
  double rtol;  // relative tolerance
  double atol;  // absolute floor (for entries whose true value is ~0)
};
inline constexpr tol f64_tol{1e-6, 1e-6, 1e-8};
inline constexpr tol f32_tol{1e-2, 1e-3, 1e-4};

inline bool close(double got, double want, double rtol, double atol) {
  if (!std::isfinite(got) || !std::isfinite(want)) return false;
  return std::abs(got - want) <= atol + rtol * std::max(std::abs(got), std::abs(want));
}

// Elementwise comparison of two vectors; reports the first mismatches.
inline void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                        double atol, const char* what = "value") {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (close(got[i], want[i], rtol, atol)) continue;
    if (++bad <= 5)
      FAIL_CHECK(std::string(what) << "[" << i << "]: got " << got[i] << ", expected " << want[i] << " (rtol " << rtol
                      << ", atol " << atol << ")");
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << got.size() << " " << std::string(what) << " entries differ");
}

// The loss of the step that ran last, as a double.
template <class Store>
double last_loss(Store& store) {
  auto v = store.value();
  REQUIRE(v.size() == 1);
  return to_d(v[0]);
}

// Central finite differences for every element of leaf L against store.grad<L>().
// Returns the analytic gradient (of the unperturbed parameters) as doubles.
// Also requires the gradient to be non-trivial (some entry clearly non-zero), so a
// step that silently drops the gradient cannot pass.
template <class L, class Step, class Store, class... Feeds>
std::vector<double> check_grad(const Step& step, Store& store, tol t, const Feeds&... feeds) {
  using T = typename L::dtype;
  step(store, feeds...);
  const std::vector<double> grad = to_vec(store.template grad<L>());
  REQUIRE(grad.size() == numel<L>());
  auto w = store.template param<L>();
  std::vector<double> fd(grad.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const T orig = w[i];
    const double x = to_d(orig);
    const T plus = from_d<T>(x + t.eps), minus = from_d<T>(x - t.eps);
    const double h = to_d(plus) - to_d(minus);
    REQUIRE(h > 0);
    w[i] = plus;
    step(store, feeds...);
    const double lp = last_loss(store);
    w[i] = minus;
    step(store, feeds...);
    const double lm = last_loss(store);
    w[i] = orig;
    fd[i] = (lp - lm) / h;
  }
  step(store, feeds...);  // leave the store as the unperturbed step left it
  check_close(grad, fd, t.rtol, t.atol, "grad vs finite difference");
  const double gmax = std::abs(*std::max_element(grad.begin(), grad.end(),
                                                 [](double a, double b) { return std::abs(a) < std::abs(b); }));
  CHECK_MESSAGE(gmax > 10 * t.atol, "gradient is (near) zero everywhere: nothing was checked");
  return grad;
}

// ------------------------------------------------- reference computations ---
// Row-major strides of dims.
inline std::vector<std::size_t> strides_of(const std::vector<std::size_t>& dims) {
  std::vector<std::size_t> s(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}
inline std::size_t count_of(const std::vector<std::size_t>& dims) {
  std::size_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}
// Flat index into a tensor of dims `from` (right-aligned, size-1 dims broadcast) for
// the multi-index `idx` of a tensor of dims `to`.
inline std::size_t bcast_index(const std::vector<std::size_t>& from, const std::vector<std::size_t>& to,
                               const std::vector<std::size_t>& idx) {
  const auto st = strides_of(from);
  std::size_t off = to.size() - from.size(), flat = 0;
  for (std::size_t d = 0; d < from.size(); ++d) flat += (from[d] == 1 ? 0 : idx[d + off]) * st[d];
  return flat;
}
inline std::vector<std::size_t> unflatten(std::size_t flat, const std::vector<std::size_t>& dims) {
  std::vector<std::size_t> idx(dims.size());
  for (std::size_t d = dims.size(); d-- > 0;) {
    idx[d] = flat % dims[d];
    flat /= dims[d];
  }
  return idx;
}
// out[i] = f(a[bcast], b[bcast]) over the broadcast shape `out_dims`.
template <class F>
std::vector<double> ref_binary(const std::vector<double>& a, const std::vector<std::size_t>& ad,
                               const std::vector<double>& b, const std::vector<std::size_t>& bd,
                               const std::vector<std::size_t>& out_dims, F f) {
  std::vector<double> r(count_of(out_dims));
  for (std::size_t i = 0; i < r.size(); ++i) {
    const auto idx = unflatten(i, out_dims);
    r[i] = f(a[bcast_index(ad, out_dims, idx)], b[bcast_index(bd, out_dims, idx)]);
  }
  return r;
}

// Evaluate expression E with ctg::forward and return its value as doubles.
template <class Store, class Step, class... Feeds>
std::vector<double> run_forward(const Step& step, Store& store, const Feeds&... feeds) {
  step(store, feeds...);
  return to_vec(store.value());
}

}  // namespace gc
