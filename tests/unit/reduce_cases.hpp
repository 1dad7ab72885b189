#pragma once
// Reduction and softmax cases shared by ops_grad_reduce.cpp and ops_grad_softmax.cpp:
// references computed here (sum / mean / max over a kept axis or the whole tensor,
// softmax / log_softmax along an axis) and the one test body: forward value vs the
// reference, then d/dW sum(op(W) * R) vs central finite differences.
#include "grad_check.hpp"

namespace reduce_cases {


constexpr int whole = 99;  // "reduce everything" in the cases below
enum class rk { sum, mean, max, softmax, log_softmax };

template <class S>
std::vector<std::size_t> dims_vec() {
  return std::vector<std::size_t>(S::dims.begin(), S::dims.end());
}

// The lines of a tensor of dims `d` along `axis`: for each, the flat indices of its elements.
inline std::vector<std::vector<std::size_t>> lines_of(const std::vector<std::size_t>& d, std::size_t axis) {
  std::vector<std::size_t> outer = d;
  outer[axis] = 1;
  const auto st = gc::strides_of(d);
  std::vector<std::vector<std::size_t>> lines;
  for (std::size_t o = 0; o < gc::count_of(outer); ++o) {
    const auto idx = gc::unflatten(o, outer);
    std::size_t base = 0;
    for (std::size_t k = 0; k < d.size(); ++k) base += idx[k] * st[k];
    std::vector<std::size_t> line;
    for (std::size_t k = 0; k < d[axis]; ++k) line.push_back(base + k * st[axis]);
    lines.push_back(line);
  }
  return lines;
}

// Reference of a reduction (kept axis, or whole) or of a softmax along an axis.
inline std::vector<double> ref_reduce(rk kind, const std::vector<double>& x, const std::vector<std::size_t>& d, int axis) {
  std::vector<std::vector<std::size_t>> lines;
  if (axis == whole) {
    lines.emplace_back();
    for (std::size_t i = 0; i < x.size(); ++i) lines[0].push_back(i);
  } else {
    lines = lines_of(d, static_cast<std::size_t>(axis < 0 ? axis + static_cast<int>(d.size()) : axis));
  }
  const bool elementwise_out = kind == rk::softmax || kind == rk::log_softmax;
  std::vector<double> out(elementwise_out ? x.size() : lines.size());
  for (std::size_t l = 0; l < lines.size(); ++l) {
    double sum = 0, mx = -INFINITY;
    for (auto i : lines[l]) {
      sum += x[i];
      mx = std::max(mx, x[i]);
    }
    if (kind == rk::sum) out[l] = sum;
    if (kind == rk::mean) out[l] = sum / static_cast<double>(lines[l].size());
    if (kind == rk::max) out[l] = mx;
    if (elementwise_out) {
      double z = 0;
      for (auto i : lines[l]) z += std::exp(x[i] - mx);
      for (auto i : lines[l])
        out[i] = kind == rk::softmax ? std::exp(x[i] - mx) / z : x[i] - mx - std::log(z);
    }
  }
  return out;
}

template <rk K, int Axis, class S>
struct red {
  using shape = S;
  static constexpr rk kind = K;
  static constexpr int axis = Axis;
  template <class X>
  static auto make(X x) {
    if constexpr (K == rk::sum) {
      if constexpr (Axis == whole) return ctg::sum(x);
      else return ctg::sum<Axis>(x);
    } else if constexpr (K == rk::mean) {
      if constexpr (Axis == whole) return ctg::mean(x);
      else return ctg::mean<Axis>(x);
    } else if constexpr (K == rk::max) {
      if constexpr (Axis == whole) return ctg::max(x);
      else return ctg::max<Axis>(x);
    } else if constexpr (K == rk::softmax) {
      return ctg::softmax<Axis>(x);
    } else {
      return ctg::log_softmax<Axis>(x);
    }
  }
};

template <class S>
struct leaves;
template <std::int64_t... D>
struct leaves<ctg::shape<D...>> {
  template <class T>
  using w = ctg::param<"w", T, D...>;
  template <class T>
  using r = ctg::frozen<"r", T, D...>;
};

using m34 = ctg::shape<3, 4>;
using t234 = ctg::shape<2, 3, 4>;

template <class C, class T>
void reduce_case(gc::tol t, double value_rtol) {
  using W = typename leaves<typename C::shape>::template w<T>;
  using E = decltype(C::make(W{}));
  using R = typename leaves<ctg::shape_t<E>>::template r<T>;
  static_assert(std::is_same_v<ctg::dtype_t<E>, T>);
  CAPTURE(static_cast<int>(C::kind));
  CAPTURE(C::axis);
  gc::rng rng(101);
  ctg::cpu::device dev;
  const auto w0 = rng.vec(gc::numel<W>(), -2.0, 2.0);

  auto fwd = ctg::forward(E{});
  auto fs = ctg::make_store(dev, fwd);
  const auto w = gc::set<W>(fs, w0);
  gc::check_close(gc::run_forward(fwd, fs), ref_reduce(C::kind, w, dims_vec<typename C::shape>(), C::axis),
                  value_rtol, value_rtol, "forward value");

  auto step = ctg::value_and_grad(ctg::sum(E{} * R{}), ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  gc::set<W>(st, w0);
  gc::set<R>(st, rng.vec(gc::numel<R>(), -1.0, 1.0));
  gc::check_grad<W>(step, st, t);
}

}  // namespace reduce_cases
