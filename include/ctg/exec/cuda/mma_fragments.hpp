#pragma once
// The register fragments of one warp's tensor-core product
// mma.sync.aligned.m16n8k16 (D = A B + C, A 16 x 16, B 16 x 8, C and D
// 16 x 8; PTX ISA, "Matrix Fragments for mma.m16n8k16"), as host code: which
// element of a tile each lane holds, and the per-lane loads and packs the
// kernels use (exec/cuda/attention_mma_kernels.cuh). Tested on the CPU by an
// emulated warp (tests/unit/cuda_mma_attention.cpp); only the instruction
// itself is device code.
//
// A lane is (group g = lane / 4, thread t = lane % 4). A holds 8 halves a
// lane (4 registers of 2), B 4 halves (2 registers), C and D 4 floats. The
// halves of a register are consecutive columns of A (rows of B: its k), the
// lower in the register's low 16 bits. Tiles lie in shared memory as 16-bit
// elements with `ld` elements a row, so a register is one aligned 32-bit load.
#include <cstdint>

#include <ctg/core/config.hpp>

namespace ctg::cuda::mma {

struct coord {
  int row, col;
};

// A's element i (0..7) of `lane`: rows g and g + 8, columns 2t, 2t + 1 and 8 more.
CTG_HD constexpr coord a_element(int lane, int i) {
  return {(lane >> 2) + 8 * ((i >> 1) & 1), 2 * (lane & 3) + (i & 1) + 8 * (i >> 2)};
}
// B's element i (0..3) of `lane` as (k, n): k = 2t, 2t + 1 and 8 more; n = g.
CTG_HD constexpr coord b_element(int lane, int i) { return {2 * (lane & 3) + (i & 1) + 8 * (i >> 1), lane >> 2}; }
// C's and D's element i (0..3) of `lane`: rows g and g + 8, columns 2t, 2t + 1.
CTG_HD constexpr coord c_element(int lane, int i) { return {(lane >> 2) + 8 * (i >> 1), 2 * (lane & 3) + (i & 1)}; }

// Offsets, in 16-bit elements, of the registers of `lane`:
// A (16 x 16) at (row0, col0) of a row-major tile: element (r, c) at r * ld + c.
CTG_HD constexpr int a_register_at(int lane, int reg, int ld, int row0, int col0) {
  const coord e = a_element(lane, 2 * reg);
  return (row0 + e.row) * ld + col0 + e.col;
}
// B (16 x 8) whose k runs along a tile's rows: B(k, n) = tile(n0 + n, k0 + k), at (n0 + n) * ld + k0 + k.
// (Every B of fused attention is such a tile: K for q k^T, a transposed V for p v.)
CTG_HD constexpr int b_register_at(int lane, int reg, int ld, int n0, int k0) {
  const coord e = b_element(lane, 2 * reg);
  return (n0 + e.col) * ld + k0 + e.row;
}

// The register at `at` of a tile: two 16-bit elements, the first in the low half.
CTG_HD CTG_FORCEINLINE std::uint32_t register_of(const std::uint16_t* tile, int at) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const std::uint32_t*>(tile + at);  // (at is even: one aligned load)
#else
  return std::uint32_t(tile[at]) | std::uint32_t(tile[at + 1]) << 16;
#endif
}

template <class E>  // a 16-bit element type with .bits (bf16, f16)
CTG_HD CTG_FORCEINLINE std::uint32_t pack(float lo, float hi) {
  return std::uint32_t(E(lo).bits) | std::uint32_t(E(hi).bits) << 16;
}

// An A fragment (16 x 16) from two D fragments side by side (columns 0..7
// and 8..15), each element rounded to E: D's layout is A's, half by half
// (a_element(lane, i) is c_element(lane, i % 4), 8 columns on for i >= 4).
template <class E>
CTG_HD CTG_FORCEINLINE void a_from_d(const float (&d)[2][4], std::uint32_t (&a)[4]) {
  CTG_UNROLL
  for (int reg = 0; reg < 4; ++reg) a[reg] = pack<E>(d[reg >> 1][2 * (reg & 1)], d[reg >> 1][2 * (reg & 1) + 1]);
}

}  // namespace ctg::cuda::mma
