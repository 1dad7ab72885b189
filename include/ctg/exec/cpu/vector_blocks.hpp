#pragma once
// The shapes of the CPU loops that should vectorize: an element loop in
// blocks of 16 with no loop-carried dependence, and a row's sum or max in 16 lanes.
#include <type_traits>

#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>

// GCC's and Clang's vector types (not under nvcc's front end, which reads the
// CPU backend's headers in a .cu's host pass).
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define CTG_VECTOR_TYPES 1
#else
#define CTG_VECTOR_TYPES 0
#endif

CTG_HOT_BEGIN

namespace ctg::cpu {

// f(j) for j in [j0, j1): blocks of 16 under `ivdep`, then the tail. GCC
// vectorizes the blocks at -O2 too (its very-cheap cost model takes a loop of
// a known trip count that needs no alias check; a plain loop over a run-time
// count vectorizes only at -O3, measured 2.2x the time at -O2). f must not
// carry anything from one j to the next, nor write what another j reads; a
// lambda is marked CTG_INLINE_LAMBDA, so its body is in the loop.
template <class F>
CTG_FORCEINLINE void each_in_blocks_of_16(dim_t j0, dim_t j1, F&& f) {
  dim_t j = j0;
  for (; j + 16 <= j1; j += 16) {
#pragma GCC ivdep
    for (dim_t u = 0; u < 16; ++u) f(j + u);
  }
  for (; j < j1; ++j) f(j);
}

// A row's reduction in 16 lanes side by side (kernel::row_reduction), lane u
// taking value u of each block of 16: a sum in f64 lanes, a max in lanes of
// the value's type. Written as plain loops over the 16 lanes, GCC 12 made
// them a scalar conversion and add, or a scalar compare, per value; here the
// lanes are two vectors of 8 (GCC's vector types; a vector of 16 doubles,
// wider than any register, went through memory), each filled element by
// element from the block (copied in with memcpy instead, the loop computing
// the block turned scalar). The same operations in the same order, so the
// same bits. (bench: a causal softmax's forward 1.3x, a cross-entropy's row
// max 2.6x faster in GPT-2's step on this host's AVX-512 CPU.)
#if CTG_VECTOR_TYPES
template <class T>
struct lanes8 {
  typedef T type __attribute__((vector_size(8 * sizeof(T))));
};
template <class T>
using lanes8_t = typename lanes8<T>::type;
#endif

class f64_sum_lanes {
 public:
  explicit f64_sum_lanes(double start) {
#if CTG_VECTOR_TYPES
    lo_ = hi_ = lanes8_t<double>{} + start;  // (whole: g++ -O3 warned of lanes set one by one as maybe unset)
#else
    for (int u = 0; u < 8; ++u) lo_[u] = hi_[u] = start;
#endif
  }
  template <class V>
  CTG_FORCEINLINE void add(const V (&v)[16]) {
    static_assert(std::is_arithmetic_v<V>);
#if CTG_VECTOR_TYPES
    lanes8_t<double> a, b;
    for (int u = 0; u < 8; ++u) a[u] = static_cast<double>(v[u]), b[u] = static_cast<double>(v[u + 8]);
    lo_ += a;
    hi_ += b;
#else
    for (int u = 0; u < 8; ++u) lo_[u] += static_cast<double>(v[u]), hi_[u] += static_cast<double>(v[u + 8]);
#endif
  }
  // The lanes' sums, lane u at out[u].
  void store(double (&out)[16]) const {
    for (int u = 0; u < 8; ++u) out[u] = lo_[u], out[u + 8] = hi_[u];
  }

 private:
#if CTG_VECTOR_TYPES
  lanes8_t<double> lo_, hi_;
#else
  double lo_[8], hi_[8];
#endif
};

// lane u = v[u] > lane u ? v[u] : lane u, noting whether any v[u] was a NaN.
template <class V>
class max_lanes {
 public:
  explicit max_lanes(V start) {
#if CTG_VECTOR_TYPES
    lo_ = hi_ = lanes8_t<V>{} + start;
#else
    for (int u = 0; u < 8; ++u) lo_[u] = hi_[u] = start;
#endif
  }
  CTG_FORCEINLINE void add(const V (&v)[16]) {
#if CTG_VECTOR_TYPES
    lanes8_t<V> a, b;
    for (int u = 0; u < 8; ++u) a[u] = v[u], b[u] = v[u + 8];
    nan_ |= (a != a) | (b != b);
    lo_ = a > lo_ ? a : lo_;
    hi_ = b > hi_ ? b : hi_;
#else
    for (int u = 0; u < 8; ++u) {
      nan_[u] |= v[u] != v[u] || v[u + 8] != v[u + 8];
      lo_[u] = v[u] > lo_[u] ? v[u] : lo_[u];
      hi_[u] = v[u + 8] > hi_[u] ? v[u + 8] : hi_[u];
    }
#endif
  }
  bool saw_nan() const {
    bool any = false;
    for (int u = 0; u < 8; ++u) any |= nan_[u] != 0;
    return any;
  }
  void store(V (&out)[16]) const {
    for (int u = 0; u < 8; ++u) out[u] = lo_[u], out[u + 8] = hi_[u];
  }

 private:
#if CTG_VECTOR_TYPES
  lanes8_t<V> lo_, hi_;
  decltype(lanes8_t<V>{} != lanes8_t<V>{}) nan_{};
#else
  V lo_[8], hi_[8];
  bool nan_[8] = {};
#endif
};

}  // namespace ctg::cpu

CTG_HOT_END
