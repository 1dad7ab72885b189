#pragma once
// Run-time shapes: every node's static dims with the fed sizes filled in,
// checked as they are computed. Shared by every backend.
#include <algorithm>
#include <string>
#include <vector>

#include <ctg/core/dims_text.hpp>
#include <ctg/core/error.hpp>
#include <ctg/lower/node_table.hpp>

namespace ctg::detail {

// n = the element count of s, when no dim is negative and the dims that are
// not 0 have a product that fits (checked_numel says which is wrong).
inline bool numel_fits(const rt_shape& s, dim_t& n) {
  dim_t product = 1;
  bool empty = false;
  for (std::size_t i = 0; i < s.rank; ++i) {
    if (s.d[i] < 0) return false;
    empty = empty || s.d[i] == 0;
    if (s.d[i] != 0 && __builtin_mul_overflow(product, s.d[i], &product)) return false;
  }
  n = empty ? 0 : product;
  return true;
}
// The same, or a ctg::error naming `what`. (The product of the dims that are
// not 0 must fit too: a 0 first hid an overflow of the rest, which strides
// and sizes then computed: [0, 2^40, 2^40].)
inline dim_t checked_numel(const rt_shape& s, const char* what) {
  dim_t n = 0;
  if (numel_fits(s, n)) return n;
  for (std::size_t i = 0; i < s.rank; ++i)
    if (s.d[i] < 0) throw error(std::string("ctg: negative size in ") + what + " dims " + dims_text(s));
  throw error(std::string("ctg: size overflows in ") + what + ": dims " + dims_text(s));
}

// numpy broadcast of two run-time shapes (a, b) whose static dims are (as,
// bs): only a static 1, or a missing dim, stretches. A ctg::dyn dim never
// does, even when it is fed 1: its gradient is not summed over the other's
// size, so such a dim must equal the other's.
inline rt_shape broadcast_rt(const rt_shape& a, const shape_value& as, const rt_shape& b, const shape_value& bs,
                             const char* where) {
  rt_shape r;
  r.rank = a.rank > b.rank ? a.rank : b.rank;
  for (std::size_t i = 0; i < r.rank; ++i) {
    const bool sa = i >= a.rank || as.d[as.rank - 1 - i] == 1, sb = i >= b.rank || bs.d[bs.rank - 1 - i] == 1;
    const dim_t da = i < a.rank ? a.d[a.rank - 1 - i] : 1, db = i < b.rank ? b.d[b.rank - 1 - i] : 1;
    dim_t& out = r.d[r.rank - 1 - i];
    if (sb || da == db) out = da;
    else if (sa) out = db;
    else
      throw error(std::string("ctg: shape mismatch at run time in ") + where + ": " + dims_text(a) + " vs " +
                  dims_text(b) + " (a ctg::dyn dim never broadcasts)");
  }
  return r;
}

inline rt_shape static_rt(const shape_value& v) {
  rt_shape r;
  r.rank = v.rank;
  for (std::size_t i = 0; i < v.rank; ++i) r.d[i] = v.d[i];
  return r;
}

// The run-time shape of input `name` of static dims `dims`, its dyn dims fed
// `dyn_dims` (in order), checked against the fed span: `size` elements, and
// not null unless empty.
inline rt_shape fed_shape(const char* name, const shape_value& dims, const dim_t* dyn_dims, bool has_data,
                          std::size_t size) {
  rt_shape s = static_rt(dims);
  for (std::size_t d = 0, k = 0; d < s.rank; ++d)
    if (s.d[d] == dyn) s.d[d] = dyn_dims[k++];
  // (The message's text is made only for an error: a step allocates nothing.)
  auto what = [&] { return std::string("input '") + name + "'"; };
  dim_t n = 0;
  if (!numel_fits(s, n)) checked_numel(s, what().c_str());  // (throws, naming the input)
  if (!has_data && n > 0) throw error("ctg: " + what() + " is fed a null pointer");
  if (static_cast<dim_t>(size) != n)
    throw error("ctg: " + what() + " expects " + std::to_string(n) + " elements (dims " + dims_text(s) +
                ") but was fed " + std::to_string(size));
  return s;
}

inline void swap_last_dims(rt_shape& s) {
  const dim_t t = s.d[s.rank - 1];
  s.d[s.rank - 1] = s.d[s.rank - 2];
  s.d[s.rank - 2] = t;
}

// The run-time shape of node i of a plan table (lower/node_table.hpp's view) from
// the shapes before it (fed inputs were set from their feeds), by its
// shape_rule, checked as it is computed.
inline void resolve_shape(const table_view& t, std::size_t i, rt_shape* shapes) {
  const node_desc& d = t.node[i];
  rt_shape& out = shapes[i];
  auto child = [&](std::size_t k) -> const rt_shape& { return shapes[t.child(i, k)]; };
  switch (d.shape) {
    case shape_rule::fed: break;
    case shape_rule::static_dims: out = static_rt(d.dims); break;
    case shape_rule::scalar: out = rt_shape{}; break;
    case shape_rule::same_as: out = shapes[d.shape_from]; break;
    case shape_rule::fill_dyn:
    case shape_rule::reduce: {
      // The dyn dims from the source, right-aligned. A reduction's kept
      // static dim (not 1) must be the child's there (sum_to<S> of a dyn
      // dim); a max over no element is an error where it is read
      // (resolve_shapes).
      const rt_shape& x = shapes[d.shape_from];
      out = static_rt(d.dims);
      for (std::size_t k = 0; k < out.rank; ++k) {
        const dim_t from = x.d[x.rank - out.rank + k];
        if (out.d[k] == dyn) out.d[k] = from;
        else if (d.shape == shape_rule::reduce && out.d[k] != 1 && from != out.d[k])
          throw error("ctg: shape mismatch at run time in a reduction: " + dims_text(x) + " to " +
                      dims_text(out) + " (a ctg::dyn dim is summed to a static one only when they agree)");
      }
      break;
    }
    case shape_rule::stretch: {
      // broadcast_to<S>: each of the child's dims that is not a static 1
      // must be S's there at run time (a dyn dim fed 1 does not stretch).
      out = static_rt(d.dims);
      const shape_value& cs = t.node[t.child(i, 0)].dims;
      const rt_shape& cr = child(0);
      for (std::size_t k = 0; k < cs.rank; ++k)
        if (cs.d[k] != 1 && cr.d[k] != out.d[out.rank - cs.rank + k])
          throw error("ctg: shape mismatch at run time in broadcast_to: " + dims_text(cr) + " to " + dims_text(out) +
                      " (a ctg::dyn dim never broadcasts)");
      break;
    }
    case shape_rule::broadcast: {
      // Each dim is set by the children whose static dim there is not 1; a
      // static 1 (or a missing dim) stretches, anything else must agree (a
      // dyn dim fed 1 too: it does not stretch).
      out = static_rt(d.dims);
      bool set[max_rank]{};
      for (std::size_t c = 0; c < d.nchild; ++c) {
        const shape_value& cs = t.node[t.child(i, c)].dims;
        const rt_shape& cr = child(c);
        for (std::size_t k = 0; k < cs.rank; ++k) {
          if (cs.d[k] == 1) continue;
          const std::size_t at = out.rank - cs.rank + k;
          if (!set[at]) out.d[at] = cr.d[k], set[at] = true;
          else if (out.d[at] != cr.d[k])
            throw error("ctg: shape mismatch at run time in an elementwise op: dim " + std::to_string(cr.d[k]) +
                        " vs " + std::to_string(out.d[at]) + " (a ctg::dyn dim never broadcasts)");
        }
      }
      for (std::size_t k = 0; k < out.rank; ++k)
        if (!set[k]) out.d[k] = 1;
      break;
    }
    case shape_rule::reshape: {
      const shape_value& xs = t.node[d.shape_from].dims;
      const rt_shape& x = shapes[d.shape_from];
      out = static_rt(d.dims);
      std::size_t out_dyn = 0, x_dyn = 0;
      for (std::size_t k = 0; k < out.rank; ++k) out_dyn += out.d[k] == dyn;
      for (std::size_t k = 0; k < xs.rank; ++k) x_dyn += xs.d[k] == dyn;
      std::size_t from = 0;
      for (std::size_t k = 0; k < out.rank; ++k) {
        if (out.d[k] != dyn) continue;
        if (out_dyn != x_dyn) {  // (one dyn dim merging all of x's)
          out.d[k] = 1;
          for (std::size_t j = 0; j < xs.rank; ++j)
            if (xs.d[j] == dyn) out.d[k] *= x.d[j];
          continue;
        }
        while (xs.d[from] != dyn) ++from;
        out.d[k] = x.d[from++];
      }
      if (out.numel() != x.numel())
        throw error("ctg: shape mismatch at run time in reshape: " + dims_text(x) + " to " + dims_text(out));
      break;
    }
    case shape_rule::gather: {
      const rt_shape& table = child(0);
      out = child(1);
      for (std::size_t k = 1; k < table.rank; ++k) out.d[out.rank++] = table.d[k];
      break;
    }
    case shape_rule::transpose:
      out = child(0);
      swap_last_dims(out);
      break;
    case shape_rule::matmul: {
      rt_shape a = child(0), b = child(1);
      if (d.transpose_a) swap_last_dims(a);
      if (d.transpose_b) swap_last_dims(b);
      if (a.d[a.rank - 1] != b.d[b.rank - 2])
        throw error(std::string(d.kind == node_kind::fp8_matmul ? "ctg: shape mismatch at run time in fp8_matmul: "
                                                                : "ctg: shape mismatch at run time in matmul: ") +
                    dims_text(a) + " @ " + dims_text(b));
      rt_shape ba = a, bb = b;
      shape_value sa = t.node[t.child(i, 0)].dims, sb = t.node[t.child(i, 1)].dims;
      ba.rank -= 2;
      bb.rank -= 2;
      sa.rank -= 2;
      sb.rank -= 2;
      out = broadcast_rt(ba, sa, bb, sb,
                         d.kind == node_kind::fp8_matmul ? "fp8_matmul batch dims" : "matmul batch dims");
      if (d.sum_batches) out.rank = 0;  // (their sum: the batch dims checked, not kept)
      out.d[out.rank++] = a.d[a.rank - 2];
      out.d[out.rank++] = b.d[b.rank - 1];
      break;
    }
  }
  if (d.kind == node_kind::attention && d.nchild >= 3)  // q, k and v of one run-time shape
    for (std::size_t c = 1; c < 3; ++c)
      if (!(child(c) == child(0)))
        throw error("ctg: shape mismatch at run time in causal_attention: q " + dims_text(child(0)) + ", " +
                    (c == 1 ? "k " : "v ") + dims_text(child(c)));
}

// The fed inputs node i reads, at any depth, with the sizes they were fed:
// what a shape error at node i names ("; it reads 'x' fed 2 x 4, 'y' fed 3 x 4").
inline std::string fed_inputs_read_by(const table_view& t, std::size_t i, const rt_shape* shapes) {
  std::vector<bool> seen(t.size, false);
  std::vector<std::size_t> todo{i};
  std::vector<std::size_t> fed;
  seen[i] = true;
  while (!todo.empty()) {
    const std::size_t j = todo.back();
    todo.pop_back();
    if (t.node[j].fed && t.node[j].name) fed.push_back(j);
    for (std::size_t c = 0; c < t.node[j].nchild; ++c)
      if (!seen[t.child(j, c)]) seen[t.child(j, c)] = true, todo.push_back(t.child(j, c));
  }
  std::sort(fed.begin(), fed.end());  // (in graph order)
  std::string s;
  for (std::size_t j : fed) s += std::string(s.empty() ? "; it reads " : ", ") + "'" + t.node[j].name + "' fed " + dims_text(shapes[j]);
  return s;
}

// Which nodes' values reach an element of an output: an output with
// elements, and the children of such a node that have elements themselves
// (the nodes are in topological order: readers after what they read).
inline std::vector<bool> values_reaching_an_output(const table_view& t, const rt_shape* shapes) {
  std::vector<bool> read(t.size, false), reaches(t.size, false);
  for (std::size_t j = t.size; j-- > 0;) {
    reaches[j] = shapes[j].numel() > 0 && (t.node[j].output || read[j]);
    if (reaches[j])
      for (std::size_t c = 0; c < t.node[j].nchild; ++c) read[t.child(j, c)] = true;
  }
  return reaches;
}

// Every node's run-time shape, in order; an error names the fed inputs the
// node reads (a shape alone does not say which feed is wrong). A max over
// no element is an error, as PyTorch's (a sum is 0, a mean NaN), where its
// value reaches an output's element: a softmax over an empty axis reads its
// max for no element, and is empty, as PyTorch's.
inline void resolve_shapes(const table_view& t, rt_shape* shapes) {
  for (std::size_t i = 0; i < t.size; ++i) {
    try {
      resolve_shape(t, i, shapes);
    } catch (const error& e) {
      throw error(e.what() + fed_inputs_read_by(t, i, shapes));
    }
  }
  std::vector<bool> reaches;  // (worked out only when a max has no element)
  for (std::size_t i = 0; i < t.size; ++i) {
    const node_desc& d = t.node[i];
    // A position-aware op reads its element's column (and a causal mask its
    // row) as an i32 (graph/functors.hpp).
    const rt_shape& s = shapes[i];
    constexpr dim_t i32_end = dim_t{1} << 31;
    if ((d.index_aware && s.rank >= 1 && s.d[s.rank - 1] >= i32_end) ||
        (d.reads_row && s.rank >= 2 && s.d[s.rank - 2] >= i32_end))
      throw error("ctg: causal_mask and one_hot take rows and columns below 2^31: dims " + dims_text(s) +
                  fed_inputs_read_by(t, i, shapes));
    if (!d.max_reduce || shapes[i].numel() == 0 || shapes[d.shape_from].numel() > 0) continue;
    if (reaches.empty()) reaches = values_reaching_an_output(t, shapes);
    if (reaches[i])
      throw error("ctg: max over an empty axis: " + dims_text(shapes[d.shape_from]) + " to " + dims_text(shapes[i]) +
                  " (the max of no element is undefined; a sum is 0, a mean NaN)" + fed_inputs_read_by(t, i, shapes));
  }
}

}  // namespace ctg::detail
