#pragma once
// Whether a launch of a fused group's kernel reads and writes its rows in
// chunks of 16 bytes (lower/read_ahead.hpp), decided on the host per launch:
// the chunk is 16 bytes of the dtype a thread computes (the group's output;
// for a reduction root, the values it reduces), at most 8 elements; it
// applies where the row's length is a multiple of it and every buffer read
// along the row, and every output written per element (a side output too),
// start aligned (a
// store's buffers do: exec/buffers.hpp; a layer's slice of a stack may not).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <ctg/core/config.hpp>
#include <ctg/lower/group.hpp>
#include <ctg/lower/kernel_expr.hpp>
#include <ctg/lower/loop_layout.hpp>
#include <ctg/lower/read_ahead.hpp>

namespace ctg::cuda {

// Does the plan's kernel write its output in chunks? (A reduction writes
// one value per row, or per output: the values it reads come in chunks.)
template <class Plan>
inline constexpr bool writes_chunks = Plan::loop == loop_kind::flat || Plan::loop == loop_kind::rows;
// The dtype a thread of the plan's kernel computes per element, and its chunk.
template <class Plan>
using chunked_dtype = std::conditional_t<writes_chunks<Plan>, typename Plan::dtype, typename Plan::body::dtype>;
template <class Plan>
inline constexpr dim_t plan_chunk = kernel::chunk_elements<chunked_dtype<Plan>>;

// The chunk a launch of this plan can take (1: element by element), from
// the row's length and the buffers' addresses.
template <class Plan, std::size_t K, std::size_t NR>
dim_t chunk_width(const kernel::context<K, NR>& c, const kernel::loop_layout<K>& layout,
                  typename Plan::outputs out) {
  constexpr dim_t V = plan_chunk<Plan>;
  if constexpr (V == 1) {
    return 1;
  } else {
    auto aligned = []<class T>(const T* p) {
      return reinterpret_cast<std::uintptr_t>(p) % kernel::chunk_alignment<T, V> == 0;
    };
    bool out_aligned = !writes_chunks<Plan> || aligned(out.root);
    if constexpr (Plan::outputs::has_side) out_aligned = out_aligned && aligned(out.side);
    const bool reads_aligned = kernel::read_ahead<typename Plan::body>::template aligned_for<V>(c) &&
                               []<class... Rs>(tl::list<Rs...>, const auto& ctx) {
                                 return (kernel::read_ahead<typename Rs::child>::template aligned_for<V>(ctx) && ...);
                               }(typename Plan::reductions{}, c);
    return layout.row_length() % V == 0 && out_aligned && reads_aligned ? V : 1;
  }
}

}  // namespace ctg::cuda
