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
#include <cstdio>
#include <string>
#include <string_view>

#include <ctg/core/dims_text.hpp>
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
inline std::string block_title(std::size_t stack, const node_description& s) {
  const char* backward =
      s.recomputes_layers ? "; each layer's forward part runs again in backward" : "; every layer's values kept";
  return cat("block of #", std::to_string(stack), " (", node_title(s), "): runs once per layer", backward);
}

inline void append_group_summary(std::string& out, const step_description& d, const std::string& indent) {
  for (std::size_t g = 0; g < d.group_count(); ++g) {
    const group_description& gr = d.group[g];
    const node_description& root = d.node[gr.root];
    char head[96];
    std::snprintf(head, sizeof head, "g%-3zu %-9s %-24s %3zu node%s  ", g, gr.backward ? "backward" : "forward",
                  group_title(gr).c_str(), gr.nodes, gr.nodes == 1 ? " " : "s");
    out.append(cat(indent, head, node_line_text(d, gr.root)));
    if (gr.nodes > 1) {
      out.append(":");
      for (std::size_t i = 0; i <= gr.root; ++i)
        if (d.node[i].group == g) out.append(cat(" ", d.node[i].op));
    }
    const std::string recompute = recompute_text(gr);
    if (!recompute.empty()) out.append(cat("  ", recompute));
    out.append("\n");
    for (const block_description& b : d.blocks) {
      if (b.stack != gr.root) continue;
      out.append(cat(indent, "    ", block_title(b.stack, root), ":\n"));
      append_group_summary(out, *b.step, indent + "    ");
    }
  }
  std::string duplicated;
  for (std::size_t i = 0; i < d.size(); ++i)
    if (d.node[i].duplicated)
      duplicated.append(cat(duplicated.empty() ? "" : ", ", node_line_text(d, i)));
  if (!duplicated.empty()) out.append(cat(indent, "computed again in each group that reads it: ", duplicated, "\n"));
}

}  // namespace ctg::detail

namespace ctg::io {

// The groups of step, one line each, in the order they run; a stack's
// block's groups follow its stack's line, indented (see the top of this file).
template <class Step>
std::string group_summary(const Step&) {
  std::string out;
  detail::append_group_summary(out, description<Step>, "");
  return out;
}

}  // namespace ctg::io
