#pragma once
// Data movement on the CPU: the transpose of the last two dims, gather
// (embedding rows by id) and its adjoint scatter_add. The ids were checked
// against the table before the step ran (exec/index_checks.hpp).
//
//   ctg::cpu::run_transpose<Step, R>(bindings);
//   ctg::cpu::run_gather<Step, R>(bindings);
//   ctg::cpu::run_scatter_add<Step, R>(bindings);
#include <algorithm>
#include <cstring>

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

namespace ctg::cpu {
// out[i..., :] = table[ids[i...], :]
template <class Step, std::size_t R>
void run_gather(const bindings<step_of<Step>::nodes::size>& b) {
  using T = typename tl::at_t<R, typename step_of<Step>::nodes>::dtype;
  constexpr std::size_t it = schedule<Step>::table.child(R, 0), ii = schedule<Step>::table.child(R, 1);
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
template <class Step, std::size_t R>
void run_scatter_add(const bindings<step_of<Step>::nodes::size>& b) {
  using nodes = typename step_of<Step>::nodes;
  using TO = typename tl::at_t<R, nodes>::dtype;
  constexpr std::size_t ig = schedule<Step>::table.child(R, 0), ii = schedule<Step>::table.child(R, 1);
  using TG = typename tl::at_t<ig, nodes>::dtype;
  const rt_shape& os = b.shape[R];
  const dim_t rows = os.d[0], row_len = rows ? os.numel() / rows : 0;
  const i32* ids = b.template as<const i32>(ii);
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
