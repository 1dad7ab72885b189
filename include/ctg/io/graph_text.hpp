#pragma once
// A step's description (lower/describe.hpp) as text: a title and a type line
// for each node, a title for each group, and a summary of the groups, one
// line each, in the order they run (io/dot.hpp draws the same description):
//
//   std::fputs(ctg::io::group_summary(step).c_str(), stdout);
//
//   g0   forward   matmul                     1 node   #2 matmul f32 [dyn, 32]  recomputed in backward (region of #4)
//   g1   forward   elementwise, flat          2 nodes  #4 checkpoint f32 [dyn, 32]: silu checkpoint
//   g3   forward   reduction, axis reduce     2 nodes  #8 mean f32 []: square mean
//   g5   backward  elementwise, rows          4 nodes  #16 mul f32 [dyn, 16]: broadcast mul mul mul
//   computed again in each group that reads it: #1 cast f32 [dyn, 32]
//
// (group, part, kind and loop shape, nodes it computes, the node it writes
// and its type, the ops fused into it, and whether a checkpoint region
// runs it again; last, the cheap nodes with no buffer that every group
// reading them computes again.)
//
// A stack's line is followed by its block's groups (the block's graph runs
// once per layer), indented.
//
// And a store's group profile (exec/group_profile.hpp), slowest group first:
//
//   store.profile_groups(true);  /* run steps */
//   std::fputs(ctg::io::group_profile_text(store).c_str(), stdout);
//
//      total ms  share    calls   ms a call      GB/s    GFLOP/s  group
//        10.383  12.6 %       3      3.4610       1.2      103.4  #14 matmul a^T b bf16 [dyn, 8, dyn, dyn] (block of #9)
//         9.121  11.1 %       3      3.0403       2.1             #25 softmax f32 [dyn, 8, dyn, dyn] (block of #9)
//
// (the group's time summed over its calls, its share of all groups' time,
// its calls, its bytes moved and a product's operations per second, and
// the node it writes, in its block for a stack's groups; then the total,
// and the sums by kind of group, as group_summary names them.)
#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ctg/core/dims_text.hpp>
#include <ctg/exec/group_profile.hpp>
#include <ctg/lower/describe.hpp>

namespace ctg::detail {

// The parts (strings, string views, C strings) one after the other. (Written
// with operator+, "text" + std::string(...) trips g++ 12's -Wrestrict at -O3.)
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string s;
  (s.append(parts), ...);
  return s;
}

inline std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// "mul", "param w1", "constant 0.5", "dropout_mask attn.drop p=0.1", "stack x2".
inline std::string node_title(const node_description& n) {
  std::string t(n.op);
  if (!n.name.empty()) t.append(cat(" ", n.name));
  if (n.kind == node_kind::constant) t.append(cat(" ", number_text(n.value)));
  if (n.kind == node_kind::random) t.append(cat(" p=", number_text(n.value)));
  if (n.kind == node_kind::stack) t.append(cat(" x", std::to_string(n.layers)));
  return t;
}

// "#12 matmul f32 [dyn, 16]": the node, its dtype and dims.
inline std::string node_line_text(const step_description& d, std::size_t i) {
  const node_description& n = d.node[i];
  return cat("#", std::to_string(i), " ", node_title(n), " ", n.dtype, " ", dims_text(n.dims));
}

// "f32 [dyn, 16], grad" or "..., no grad".
inline std::string node_type_text(const node_description& n) {
  return cat(n.dtype, " ", dims_text(n.dims), n.requires_grad ? ", grad" : ", no grad");
}

constexpr std::string_view group_kind_name(group_kind k) {
  switch (k) {
    case group_kind::elementwise: return "elementwise";
    case group_kind::reduction: return "reduction";
    case group_kind::matmul: return "matmul";
    case group_kind::transpose: return "transpose";
    case group_kind::gather: return "gather";
    case group_kind::scatter_add: return "scatter_add";
    case group_kind::stack: return "stack";
    case group_kind::fp8: return "fp8";
    case group_kind::attention: return "attention";
  }
  return "";
}

constexpr std::string_view loop_kind_name(loop_kind k) {
  switch (k) {
    case loop_kind::flat: return "flat";
    case loop_kind::rows: return "rows";
    case loop_kind::row_reduce: return "row reduce";
    case loop_kind::axis_reduce: return "axis reduce";
  }
  return "";
}

// "elementwise, rows", "reduction, axis reduce", "matmul".
inline std::string group_title(const group_description& g) {
  std::string t(group_kind_name(g.kind));
  if (g.kind == group_kind::elementwise || g.kind == group_kind::reduction) t.append(cat(", ", loop_kind_name(g.loop)));
  return t;
}

// "recomputed in backward (region of #4)", "checkpoint region of #4, not recomputed", or "".
inline std::string recompute_text(const group_description& g) {
  if (g.region == no_index) return "";
  const std::string region = cat("region of #", std::to_string(g.region));
  return g.recomputed ? cat("recomputed in backward (", region, ")") : cat("checkpoint ", region, ", not recomputed");
}

// "block of #5 (stack x2): runs once per layer; each layer's forward part runs again in backward".
// (has_backward: the step has a backward part; a forward step keeps one layer's values at a time.)
inline std::string block_title(std::size_t stack, const node_description& s, bool has_backward) {
  const char* backward = !has_backward          ? "; one layer's values at a time (no backward)"
                         : s.recomputes_layers ? "; each layer's forward part runs again in backward"
                                               : "; every layer's values kept";
  return cat("block of #", std::to_string(stack), " (", node_title(s), "): runs once per layer", backward);
}

// forward_only: d is the block of a stack in a step with no backward part,
// where only d's forward part runs.
inline void append_group_summary(std::string& out, const step_description& d, const std::string& indent,
                                 bool forward_only = false) {
  const bool has_backward = !forward_only && d.forward_end < d.size();
  for (std::size_t g = 0; g < d.group_count(); ++g) {
    const group_description& gr = d.group[g];
    if (forward_only && gr.backward) continue;
    const node_description& root = d.node[gr.root];
    char head[96];
    std::snprintf(head, sizeof head, "g%-3zu %-9s %-24s %3zu node%s  ", g, gr.backward ? "backward" : "forward",
                  group_title(gr).c_str(), gr.nodes, gr.nodes == 1 ? " " : "s");
    out.append(cat(indent, head, node_line_text(d, gr.root)));
    if (gr.nodes > 1) {
      out.append(":");
      for (std::size_t i = 0; i <= gr.root; ++i)
        if (d.node[i].group == g) out.append(cat(" ", d.node[i].op));
      if (gr.side != no_index) out.append(cat("; also writes ", node_line_text(d, gr.side)));
    }
    const std::string recompute = forward_only ? std::string() : recompute_text(gr);
    if (!recompute.empty()) out.append(cat("  ", recompute));
    out.append("\n");
    for (const block_description& b : d.blocks) {
      if (b.stack != gr.root) continue;
      out.append(cat(indent, "    ", block_title(b.stack, root, has_backward), ":\n"));
      append_group_summary(out, *b.step, indent + "    ", !has_backward);
    }
  }
  std::string duplicated;
  for (std::size_t i = 0; i < d.size(); ++i)
    if (d.node[i].duplicated && !(forward_only && d.node[i].backward))
      duplicated.append(cat(duplicated.empty() ? "" : ", ", node_line_text(d, i)));
  if (!duplicated.empty()) out.append(cat(indent, "computed again in each group that reads it: ", duplicated, "\n"));
}

// The step of the block at `path` from d (d itself for an empty path; null: none).
inline const step_description* block_step_of(const step_description& d, const block_path& path) {
  const step_description* s = &d;
  for (std::size_t k = 0; k < path.depth() && s; ++k) {
    const step_description* inner = nullptr;
    for (const block_description& b : s->blocks)
      if (b.stack == path.stack[k]) inner = b.step;
    s = inner;
  }
  return s;
}

// " (block of #5)", " (block of #2 in the block of #5)", or "" for the step's own groups.
inline std::string block_text(const block_path& path) {
  std::string t;
  for (std::size_t k = path.depth(); k-- > 0;)
    t.append(cat(k + 1 == path.depth() ? " (block of #" : " in the block of #", std::to_string(path.stack[k])));
  return path.depth() ? t + ")" : t;
}

inline std::string group_profile_text(const step_description& d, std::span<const group_timing> times) {
  std::vector<group_timing> order(times.begin(), times.end());
  std::stable_sort(order.begin(), order.end(), [](const group_timing& a, const group_timing& b) { return a.seconds > b.seconds; });
  double total = 0;
  for (const group_timing& t : order) total += t.seconds;
  // The description a timing's root indexes: the step's, or its stack's
  // block's (null: none that holds the root, as a profile of another step).
  auto described_in = [&](const group_timing& t) -> const step_description* {
    const step_description* s = block_step_of(d, t.block);
    return s && t.root < s->size() ? s : nullptr;
  };
  std::string out = "   total ms  share    calls   ms a call      GB/s    GFLOP/s  group\n";
  for (const group_timing& t : order) {
    const step_description* s = described_in(t);
    const double per_call = t.calls ? t.seconds / static_cast<double>(t.calls) : 0.0;
    char head[112], gflops[24] = "";
    if (t.flops > 0 && t.seconds > 0) std::snprintf(gflops, sizeof gflops, "%10.1f", t.flops / t.seconds / 1e9);
    std::snprintf(head, sizeof head, "%11.3f %5.1f %% %8zu %11.4f %9.1f %10s  ", t.seconds * 1e3,
                  total > 0 ? 100.0 * t.seconds / total : 0.0, t.calls, per_call * 1e3,
                  t.seconds > 0 ? t.bytes / t.seconds / 1e9 : 0.0, gflops);
    out.append(cat(head, s ? node_line_text(*s, t.root) : cat("#", std::to_string(t.root)), block_text(t.block), "\n"));
  }
  char tail[64];
  std::snprintf(tail, sizeof tail, "%11.3f ms in all; by kind:\n", total * 1e3);
  out.append(tail);
  // The sums by the groups' kind and loop shape, as group_summary names them.
  std::vector<std::pair<std::string, double>> kinds;
  for (const group_timing& t : order) {
    const step_description* s = described_in(t);
    const std::string kind = s ? group_title(s->group[s->node[t.root].group]) : "?";
    auto k = std::find_if(kinds.begin(), kinds.end(), [&](const auto& e) { return e.first == kind; });
    if (k == kinds.end()) kinds.emplace_back(kind, t.seconds);
    else k->second += t.seconds;
  }
  std::stable_sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [kind, seconds] : kinds) {
    char line[96];
    std::snprintf(line, sizeof line, "%11.3f %5.1f %%  ", seconds * 1e3, total > 0 ? 100.0 * seconds / total : 0.0);
    out.append(cat(line, kind, "\n"));
  }
  return out;
}

}  // namespace ctg::detail

namespace ctg::io {

// A store's group profile (store.profile_groups(true), then steps), one line
// a group, the slowest first (see the top of this file).
template <class Store>
std::string group_profile_text(const Store& store) {
  return detail::group_profile_text(description<typename Store::step_type>, store.group_times());
}

// The groups of step, one line each, in the order they run; a stack's
// block's groups follow its stack's line, indented (see the top of this file).
template <class Step>
std::string group_summary(const Step&) {
  std::string out;
  detail::append_group_summary(out, description<Step>, "");
  return out;
}

}  // namespace ctg::io
