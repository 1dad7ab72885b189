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

// j, as a value the optimizer cannot follow (no instruction). A loop that
// steps by it has no trip count the vectorizer can compute, so it stays
// scalar: a row under 16 elements (each_in_overlapping_blocks_of_16), whose
// loop g++ -O3 would vectorize too, compiling the group's expression once
// more for at most 15 elements (as it did the rows' tails: 90 in GPT-2's step).
CTG_FORCEINLINE dim_t opaque_index(dim_t j) {
#if defined(__GNUC__) || defined(__clang__)
  asm("" : "+r"(j));
#endif
  return j;
}

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
CTG_IVDEP
    for (dim_t u = 0; u < 16; ++u) f(j + u);
  }
  for (; j < j1; ++j) f(j);
}

// f(j) for j in [j0, j1) where f writes the same however often it runs for
// one j (a fused group's outputs: they never alias its inputs): blocks of
// 16, the last ending at j1, over part of the one before, so the row's
// expression is compiled once, vectorized (a tail loop was compiled as well,
// and g++ -O3 vectorized it too); a range under 16 one by one, scalar.
template <class F>
CTG_FORCEINLINE void each_in_overlapping_blocks_of_16(dim_t j0, dim_t j1, F&& f) {
  if (j1 - j0 < 16) {
    for (dim_t j = j0; j < j1; j = opaque_index(j + 1)) f(j);
    return;
  }
  for (dim_t j = j0;; j += 16) {
    if (j > j1 - 16) j = j1 - 16;
CTG_IVDEP
    for (dim_t u = 0; u < 16; ++u) f(j + u);
    if (j == j1 - 16) break;
  }
}

// A row's reduction in 16 lanes side by side (kernel::row_reduction), lane u
// taking value u of each block of 16: a sum in f64 lanes, a max in lanes of
// the value's type. Written as plain loops over the 16 lanes, GCC 12 made
// them a scalar conversion and add, or a scalar compare, per value; here the
// lanes are GCC's vector types, each filled element by element from the
// block (copied in with memcpy instead, the loop computing the block turned
// scalar): vectors of 8 lanes where the target has AVX (a vector of 16
// doubles, wider than any register, went through memory), of 16 bytes
// without (an 8-lane vector of floats went through memory there: a row's
// max at 9x the time of 16-byte vectors, g++ 12's x86-64 baseline). The
// same operations per lane in the same order, so the same bits. (bench: a
// causal softmax's forward 1.3x, a cross-entropy's row max 2.6x faster in
// GPT-2's step on an AVX-512 CPU.)
#if CTG_VECTOR_TYPES
#if defined(__AVX__)
template <class T>
inline constexpr int lanes_a_vector = 8;
#else
template <class T>
inline constexpr int lanes_a_vector = static_cast<int>(16 / sizeof(T));
#endif
template <class T>
struct lane_vector {
  typedef T type __attribute__((vector_size(lanes_a_vector<T> * sizeof(T))));
};
#endif

// The 16 lanes of T, as `count` vectors of `width` lanes (one lane each
// without vector types).
template <class T>
struct lanes16 {
#if CTG_VECTOR_TYPES
  static constexpr int width = lanes_a_vector<T>;
  using vector = typename lane_vector<T>::type;
#else
  static constexpr int width = 1;
  using vector = T;
#endif
  static constexpr int count = 16 / width;
  vector v[count];

  explicit lanes16(T start) {
    for (auto& p : v) p = vector{} + start;  // (whole: g++ -O3 warned of lanes set one by one as maybe unset)
  }
  // a = vector p of a block's 16 values (a reference: a returned vector of 8
  // doubles changes the ABI without AVX-512, and g++ warns of it).
  template <class V>
  static CTG_FORCEINLINE void load(vector& a, const V (&block)[16], int p) {
#if CTG_VECTOR_TYPES
    for (int u = 0; u < width; ++u) a[u] = static_cast<T>(block[p * width + u]);
#else
    a = static_cast<T>(block[p]);
#endif
  }
  // Lane u at out[u].
  void store(T (&out)[16]) const {
#if CTG_VECTOR_TYPES
    for (int u = 0; u < 16; ++u) out[u] = v[u / width][u % width];
#else
    for (int u = 0; u < 16; ++u) out[u] = v[u];
#endif
  }
};

class f64_sum_lanes {
 public:
  explicit f64_sum_lanes(double start) : lanes_(start) {}
  template <class V>
  CTG_FORCEINLINE void add(const V (&v)[16]) {
    static_assert(std::is_arithmetic_v<V>);
    for (int p = 0; p < lanes16<double>::count; ++p) {
      lanes16<double>::vector a{};  // (every lane set: g++ warned of them as maybe unset)
      lanes16<double>::load(a, v, p);
      lanes_.v[p] += a;
    }
  }
  // The lanes' sums, lane u at out[u].
  void store(double (&out)[16]) const { lanes_.store(out); }

 private:
  lanes16<double> lanes_;
};

// lane u = v[u] > lane u ? v[u] : lane u, noting whether any v[u] was a NaN.
template <class V>
class max_lanes {
 public:
  explicit max_lanes(V start) : lanes_(start) {}
  CTG_FORCEINLINE void add(const V (&v)[16]) {
    for (int p = 0; p < lanes16<V>::count; ++p) {
      vector a{};
      lanes16<V>::load(a, v, p);
      nan_ |= a != a;
      lanes_.v[p] = a > lanes_.v[p] ? a : lanes_.v[p];
    }
  }
  bool saw_nan() const {
    if constexpr (lanes16<V>::width == 1) {
      return nan_;
    } else {
      bool any = false;
      for (int u = 0; u < lanes16<V>::width; ++u) any |= nan_[u] != 0;
      return any;
    }
  }
  void store(V (&out)[16]) const { lanes_.store(out); }

 private:
  using vector = typename lanes16<V>::vector;
  lanes16<V> lanes_;
  decltype(vector{} != vector{}) nan_{};
};

}  // namespace ctg::cpu

CTG_HOT_END
