#pragma once
// A group's body evaluated on a chunk of V consecutive elements of a row,
// whose buffer reads were done ahead in wide loads (a GPU thread reads 16
// bytes per instruction: exec/cuda/elementwise_thread.hpp).
//
//   auto t = kernel::read_chunk<Body, V>(c, j0);  // c's copy, each advancing slot's V values
//                                                 // at j0 .. j0 + V - 1 read wide
//   ... Body::value(t, j0 + k) ...                // kernel::load reads t.ahead, not memory
// (store_chunk: t's V results written in wide stores; write_chunk: both.)
//
// Only slots that move along the row (kernel::load<S, T, true>) are read
// ahead; a broadcast slot, a row's reduction, dropout and constants are as
// in any context, so a chunk's values are the scalar loop's bits.
//
// A chunk's loads are aligned when the row's length is a multiple of V and
// every advancing slot's buffer starts aligned (aligned_for): a slot's outer
// strides are multiples of the row's length (loop_layout.hpp), so every
// chunk starts at a multiple of V elements.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <ctg/core/config.hpp>
#include <ctg/lower/kernel_expr.hpp>

CTG_HOT_BEGIN

namespace ctg::kernel {

// A loop's context (kernel::context<K, NR>) with its advancing slots' values
// at elements first .. first + V - 1, in Held (f32; f64 where a slot is f64).
template <class Ctx, std::size_t V, class Held>
struct chunk_context : Ctx {
  static constexpr std::size_t width = V;
  dim_t first = 0;
  Held ahead[std::extent_v<decltype(Ctx::ptr)>][V];  // (each advancing slot's filled by fetch)
};

// The widest load one instruction makes: 16 bytes.
inline constexpr std::size_t widest_load = 16;

// Bytes bytes from src to dst, both aligned to the widest piece that divides
// Bytes (up to 16): on a GPU, one load or store instruction per piece.
template <std::size_t Bytes>
CTG_HD CTG_FORCEINLINE void copy_wide(void* dst, const void* src) {
#if defined(__CUDA_ARCH__)
  if constexpr (Bytes % 16 == 0) {
    CTG_UNROLL
    for (std::size_t i = 0; i < Bytes / 16; ++i) static_cast<uint4*>(dst)[i] = static_cast<const uint4*>(src)[i];
  } else if constexpr (Bytes == 8) {
    *static_cast<uint2*>(dst) = *static_cast<const uint2*>(src);
  } else if constexpr (Bytes == 4) {
    *static_cast<unsigned*>(dst) = *static_cast<const unsigned*>(src);
  } else if constexpr (Bytes == 2) {
    *static_cast<unsigned short*>(dst) = *static_cast<const unsigned short*>(src);
  } else {
    static_assert(Bytes == 1, "ctg: internal: copy_wide copies 1, 2, 4, 8 or a multiple of 16 bytes");
    *static_cast<unsigned char*>(dst) = *static_cast<const unsigned char*>(src);
  }
#else
  std::memcpy(dst, src, Bytes);
#endif
}

// Elements per chunk of a kernel reading and writing these types: 16 bytes
// of the widest, at most 8.
template <class... Ts>
inline constexpr dim_t chunk_elements =
    static_cast<dim_t>(std::clamp<std::size_t>(widest_load / std::max({sizeof(Ts)...}), 1, 8));

// The alignment copy_wide needs for V elements of T.
template <class T, std::size_t V>
inline constexpr std::size_t chunk_alignment = V * sizeof(T) < widest_load ? V * sizeof(T) : widest_load;

// What body node E reads ahead: nothing, except advancing loads and what an
// apply's children read.
template <class E>
struct read_ahead {
  static constexpr bool reads_f64 = false;
  template <std::size_t V, class C>
  static bool aligned_for(const C&) {
    return true;
  }
  template <class C>
  CTG_HD static CTG_FORCEINLINE void fetch(C&) {}
};

template <std::size_t Slot, class T>
struct read_ahead<load<Slot, T, true>> {
  static constexpr bool reads_f64 = std::is_same_v<T, f64>;
  template <std::size_t V, class C>
  static bool aligned_for(const C& c) {
    return reinterpret_cast<std::uintptr_t>(c.ptr[Slot]) % chunk_alignment<T, V> == 0;
  }
  template <class C>
  CTG_HD static CTG_FORCEINLINE void fetch(C& c) {
    constexpr std::size_t V = C::width;
    alignas(widest_load) T raw[V];
    copy_wide<V * sizeof(T)>(raw, reinterpret_cast<const T*>(c.ptr[Slot]) + c.base[Slot] + c.first);
    CTG_UNROLL
    for (std::size_t k = 0; k < V; ++k) c.ahead[Slot][k] = load_as<T>(raw[k]);
  }
};

template <class Op, class T, class... Xs>
struct read_ahead<apply<Op, T, Xs...>> {
  static constexpr bool reads_f64 = (read_ahead<Xs>::reads_f64 || ...);
  template <std::size_t V, class C>
  static bool aligned_for(const C& c) {
    return (read_ahead<Xs>::template aligned_for<V>(c) && ...);
  }
  template <class C>
  CTG_HD static CTG_FORCEINLINE void fetch(C& c) {
    (read_ahead<Xs>::fetch(c), ...);
  }
};

// The chunk context a body's reads fit in.
template <class Body, class Ctx, std::size_t V>
using chunk_context_for = chunk_context<Ctx, V, std::conditional_t<read_ahead<Body>::reads_f64, f64, f32>>;

// Row context c with what Body reads at elements first .. first + V - 1
// read ahead.
template <class Body, std::size_t V, class Ctx>
CTG_HD CTG_FORCEINLINE chunk_context_for<Body, Ctx, V> read_chunk(const Ctx& c, dim_t first) {
  chunk_context_for<Body, Ctx, V> t;
  static_cast<Ctx&>(t) = c;
  t.first = first;
  read_ahead<Body>::fetch(t);
  return t;
}

// Body's values at the elements chunk context t was read at (read_chunk),
// written from element t.first of the row `out` starts (its root, and its
// side output where it has one: kernel::group_outputs) in wide stores.
template <class Body, std::size_t V, class T, class S, class ChunkCtx>
CTG_HD CTG_FORCEINLINE void store_chunk(const ChunkCtx& t, group_outputs<T, S> out) {
  alignas(widest_load) T raw[V];
  CTG_UNROLL
  for (std::size_t k = 0; k < V; ++k) raw[k] = store_as<T>(Body::value(t, t.first + static_cast<dim_t>(k)));
  copy_wide<V * sizeof(T)>(out.root + t.first, raw);
  if constexpr (group_outputs<T, S>::has_side) {
    alignas(widest_load) S side[V];
    CTG_UNROLL
    for (std::size_t k = 0; k < V; ++k) side[k] = group_outputs<T, S>::side_of(load_as<T>(raw[k]));
    copy_wide<V * sizeof(S)>(out.side + t.first, side);
  }
}

// Body's values at elements first .. first + V - 1 of the row context c is
// in, written to the row `out` starts in wide stores.
template <class Body, std::size_t V, class T, class S, class Ctx>
CTG_HD CTG_FORCEINLINE void write_chunk(const Ctx& c, dim_t first, group_outputs<T, S> out) {
  store_chunk<Body, V>(read_chunk<Body, V>(c, first), out);
}

}  // namespace ctg::kernel

CTG_HOT_END
