#pragma once
// Data movement on the CPU: the transpose of the last two dims, gather
// (embedding rows by id) and its adjoint scatter_add. The ids were checked
// against the table before the step ran (exec/index_checks.hpp).
//
//   ctg::cpu::run_transpose<T>(call, bindings, workspace, nullptr);
//   ctg::cpu::run_gather<T>(call, bindings, workspace, nullptr);
//   ctg::cpu::run_scatter_add<TO, TG>(call, bindings, workspace, nullptr);
// (call.child: the root's children; call.root: where it writes.)
#include <algorithm>
#include <cstring>

#include <ctg/core/config.hpp>
#include <ctg/exec/bindings.hpp>
#include <ctg/exec/cpu/transpose.hpp>
#include <ctg/exec/cpu/workspace.hpp>
#include <ctg/lower/group.hpp>

CTG_HOT_BEGIN

namespace ctg::detail {
// Elements per thread task of a copy: below two of them, one thread.
inline constexpr dim_t cpu_copy_task_elements = 16384;
}  // namespace ctg::detail

namespace ctg::cpu {

// Blocks of transpose_tile rows shared by the threads (cpu::transpose_rows).
template <class T>
void run_transpose(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const std::size_t ix = g.child[0], R = g.root;
  const rt_shape& s = b.shape[ix];
  const dim_t rows = s.d[s.rank - 2], cols = s.d[s.rank - 1];
  const dim_t nbatch = rows * cols > 0 ? s.numel() / (rows * cols) : 0;
  const T* x = b.template as<const T>(ix);
  T* out = b.template as<T>(R);
  const dim_t row_tiles = (rows + transpose_tile - 1) / transpose_tile;
  auto tiles = [&](std::size_t task, unsigned) {
    const dim_t m = static_cast<dim_t>(task) / row_tiles, i0 = static_cast<dim_t>(task) % row_tiles * transpose_tile;
    transpose_rows(x + m * rows * cols, rows, cols, out + m * rows * cols, i0, std::min(rows, i0 + transpose_tile));
  };
  const std::size_t tasks = static_cast<std::size_t>(nbatch * row_tiles);
  const bool parallel = nbatch * rows * cols >= 2 * detail::cpu_copy_task_elements;
  run_tasks(parallel ? ws.pool() : nullptr, tasks, tiles);
}

}  // namespace ctg::cpu

namespace ctg::cpu {
// out[i..., :] = table[ids[i...], :]
template <class T>
void run_gather(const group_call& g, const bindings_view& b, workspace&, float*) {
  const std::size_t it = g.child[0], ii = g.child[1], R = g.root;
  const rt_shape& ts = b.shape[it];
  const dim_t rows = ts.d[0], row_len = rows ? ts.numel() / rows : 0;
  const i32* ids = b.template as<const i32>(ii);
  const T* src = b.template as<const T>(it);
  T* out = b.template as<T>(R);
  for (dim_t i = 0, n = b.shape[ii].numel(); i < n; ++i)
    std::memcpy(out + i * row_len, src + ids[i] * row_len, row_len * sizeof(T));
}

// A zero table with each row of g added at its id, in the compute type (the
// node's dtype: every row adds in it, rounded once later). Repeated ids add
// up in the order of the ids: deterministic.
template <class TO, class TG>
void run_scatter_add(const group_call& g, const bindings_view& b, workspace&, float*) {
  const std::size_t ig = g.child[0], ii = g.child[1], R = g.root;
  const rt_shape& os = b.shape[R];
  const dim_t rows = os.d[0], row_len = rows ? os.numel() / rows : 0;
  const i32* ids = b.template as<const i32>(ii);
  const TG* rows_in = b.template as<const TG>(ig);
  TO* out = b.template as<TO>(R);
  std::fill(out, out + os.numel(), TO(0));
  for (dim_t i = 0, n = b.shape[ii].numel(); i < n; ++i) {
    TO* o = out + ids[i] * row_len;
    const TG* gi = rows_in + i * row_len;
    for (dim_t k = 0; k < row_len; ++k) o[k] += static_cast<TO>(load_as<TG>(gi[k]));
  }
}

}  // namespace ctg::cpu

CTG_HOT_END
