#pragma once
// The shapes of the CPU loops that should vectorize: an element loop in
// blocks of 16 with no loop-carried dependence, and a row's sum in 16 lanes.
#include <cstring>
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

// Sixteen f64 sums side by side, a row's sum in lanes (kernel::row_reduction):
// add(v) adds value u of a block of 16 to lane u. Written as a plain loop over
// the lanes, GCC 12 turned it into a scalar conversion and add per value (13 %
// of a causal softmax's loops); vector types keep them in SIMD registers, two
// of 8 lanes (a vector of 16 doubles, wider than any register, GCC 12 handled
// through memory). The same adds in the same order, so the same bits. (A
// row's max in lanes, written the same way, measured slower: left a loop.)
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
    for (int u = 0; u < 8; ++u) lo_[u] = hi_[u] = start;
  }
  template <class V>
  CTG_FORCEINLINE void add(const V (&v)[16]) {
    static_assert(std::is_arithmetic_v<V>);
#if CTG_VECTOR_TYPES
    lanes8_t<V> a, b;
    std::memcpy(&a, v, sizeof a);
    std::memcpy(&b, v + 8, sizeof b);
    lo_ += __builtin_convertvector(a, lanes8_t<double>);
    hi_ += __builtin_convertvector(b, lanes8_t<double>);
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

}  // namespace ctg::cpu

CTG_HOT_END
