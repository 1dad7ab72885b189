#pragma once
// Data movement on the CPU: the transpose of the last two dims, gather
// (embedding rows by id) and its adjoint scatter_add. Ids outside the table
// are a ctg::error naming the input, the position and the value.
//
//   ctg::cpu::run_transpose<Step, R>(bindings);
//   ctg::cpu::run_gather<Step, R>(bindings);
//   ctg::cpu::run_scatter_add<Step, R>(bindings);
#include <algorithm>
#include <cstring>
#include <string>

#include <ctg/core/error.hpp>
#include <ctg/exec/bindings.hpp>
#include <ctg/lower/schedule.hpp>

namespace ctg::cpu {

template <class Step, std::size_t R>
void run_transpose(const bindings<step_of<Step>::nodes::size>& b) {
  using T = typename tl::at_t<R, typename step_of<Step>::nodes>::dtype;
  constexpr std::size_t ix = schedule<Step>::table.child(R, 0);
  const rt_shape& s = b.shape[ix];
  const dim_t rows = s.d[s.rank - 2], cols = s.d[s.rank - 1];
  const dim_t nbatch = rows * cols > 0 ? s.numel() / (rows * cols) : 0;
  const T* x = b.template as<const T>(ix);
  T* out = b.template as<T>(R);
  for (dim_t m = 0; m < nbatch; ++m)
    for (dim_t i = 0; i < rows; ++i)
      for (dim_t j = 0; j < cols; ++j) out[m * rows * cols + j * rows + i] = x[m * rows * cols + i * cols + j];
}

}  // namespace ctg::cpu

namespace ctg::detail {
// The ids of node Ids, each checked against the `table_rows` rows of node Table.
template <class Step, std::size_t Table, std::size_t Ids>
const i32* checked_ids(const bindings<step_of<Step>::nodes::size>& b, dim_t table_rows) {
  using nodes = typename step_of<Step>::nodes;
  const i32* ids = b.template as<const i32>(Ids);
  const dim_t n = b.shape[Ids].numel();
  for (dim_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < table_rows) continue;
    std::string table = "a table";
    if constexpr (is_leaf_v<tl::at_t<Table, nodes>>) table = std::string("'") + tl::at_t<Table, nodes>::name.c_str() + "'";
    std::string where;
    if constexpr (is_leaf_v<tl::at_t<Ids, nodes>>)
      where = std::string(" of input '") + tl::at_t<Ids, nodes>::name.c_str() + "'";
    throw error("ctg: index " + std::to_string(ids[i]) + " at position " + std::to_string(i) + where +
                " is outside the " + std::to_string(table_rows) + " rows of " + table);
  }
  return ids;
}
}  // namespace ctg::detail

namespace ctg::cpu {
// out[i..., :] = table[ids[i...], :]
template <class Step, std::size_t R>
void run_gather(const bindings<step_of<Step>::nodes::size>& b) {
  using T = typename tl::at_t<R, typename step_of<Step>::nodes>::dtype;
  constexpr std::size_t it = schedule<Step>::table.child(R, 0), ii = schedule<Step>::table.child(R, 1);
  const rt_shape& ts = b.shape[it];
  const dim_t rows = ts.d[0], row_len = rows ? ts.numel() / rows : 0;
  const i32* ids = detail::checked_ids<Step, it, ii>(b, rows);
  const T* src = b.template as<const T>(it);
  T* out = b.template as<T>(R);
  for (dim_t i = 0, n = b.shape[ii].numel(); i < n; ++i)
    std::memcpy(out + i * row_len, src + ids[i] * row_len, row_len * sizeof(T));
}

// A zero table with each row of g added at its id, in the compute type (the
// node's dtype: every row adds in it, rounded once later). Repeated ids add
// up in the order of the ids: deterministic.
template <class Step, std::size_t R>
void run_scatter_add(const bindings<step_of<Step>::nodes::size>& b) {
  using nodes = typename step_of<Step>::nodes;
  using TO = typename tl::at_t<R, nodes>::dtype;
  constexpr std::size_t ig = schedule<Step>::table.child(R, 0), ii = schedule<Step>::table.child(R, 1);
  using TG = typename tl::at_t<ig, nodes>::dtype;
  const rt_shape& os = b.shape[R];
  const dim_t rows = os.d[0], row_len = rows ? os.numel() / rows : 0;
  const i32* ids = detail::checked_ids<Step, R, ii>(b, rows);
  const TG* g = b.template as<const TG>(ig);
  TO* out = b.template as<TO>(R);
  std::fill(out, out + os.numel(), TO(0));
  for (dim_t i = 0, n = b.shape[ii].numel(); i < n; ++i) {
    TO* o = out + ids[i] * row_len;
    const TG* gi = g + i * row_len;
    for (dim_t k = 0; k < row_len; ++k) o[k] += static_cast<TO>(load_as<TG>(gi[k]));
  }
}

}  // namespace ctg::cpu
