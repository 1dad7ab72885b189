#pragma once
// A step's graph in Graphviz's DOT language, drawn from its description
// (lower/describe.hpp): what the compiler checked and what the lowering
// decided, in one picture.
//
//   std::ofstream("step.dot") << ctg::io::to_dot(step);    // then: dot -Tsvg step.dot -o step.svg
//
// - Every node (id "n<i>"): "#i op [name]", its dtype, static dims (dyn:
//   known at run time) and "grad" or "no grad", then what happens to its
//   value: "output", "kept for backward" (bold border), "recomputed in
//   backward" (dashed border), "ends a checkpoint region".
// - Leaves by role, as filled ellipses: param green, frozen grey, input and
//   carry (a stack block's input) blue, state (FP8 scaling) orange.
// - Clusters: the forward part ("cluster_forward") and the backward part
//   ("cluster_backward"); in the forward part, each checkpoint region
//   ("cluster_region_<checkpoint node>"); inside those, one cluster per
//   fusion group ("cluster_g<g>", labelled with its kind and loop shape, as
//   in io/graph_text.hpp). Nodes no group computes (leaves, constants,
//   views, dropout masks, run-time scalars) belong to no group, and so do
//   cheap nodes that each group reading them computes again ("computed in
//   each group reading it", dotted border).
// - A ctg::nn::stack's block: a cluster in the forward part holding the
//   block's graph drawn the same way, its ids and cluster names prefixed
//   "s<stack node>_", with dashed edges from the stack's input to the
//   block's input and from the block's output to the stack node.
// - Edges: from a value to each node that reads it.
#include <initializer_list>
#include <string>
#include <string_view>

#include <ctg/io/graph_text.hpp>

namespace ctg::detail {

// A DOT string literal of lines (quotes and backslashes escaped, lines joined with \n).
inline std::string dot_label(std::initializer_list<std::string> lines) {
  std::string s = "\"";
  bool first = true;
  for (const std::string& line : lines) {
    if (line.empty()) continue;
    if (!first) s += "\\n";
    first = false;
    for (char c : line) {
      if (c == '"' || c == '\\') s += '\\';
      s += c;
    }
  }
  return s + "\"";
}

inline std::string_view leaf_fill(leaf_role r) {
  switch (r) {
    case leaf_role::param: return "#c7e9c0";
    case leaf_role::frozen: return "#d9d9d9";
    case leaf_role::input:
    case leaf_role::carry: return "#c6dbef";
    case leaf_role::state: return "#fdd0a2";
  }
  return "white";
}

// The statement of node i, whose DOT id is id.
inline std::string dot_node(const std::string& id, std::size_t i, const node_description& n) {
  const bool leaf = n.kind == node_kind::leaf;
  std::string fate;
  if (n.output) fate = "output";
  else if (n.kept && !leaf) fate = "kept for backward";
  if (n.recomputed) fate.append(fate.empty() ? "recomputed in backward" : ", recomputed in backward");
  if (n.duplicated) fate = "computed in each group reading it";
  const std::string label = dot_label({cat("#", std::to_string(i), " ", node_title(n)), node_type_text(n), fate,
                                       n.checkpoint ? "ends a checkpoint region" : ""});
  std::string attrs;
  if (leaf) attrs = cat(", shape=ellipse, fillcolor=\"", leaf_fill(n.role), "\"");
  if (n.output) attrs += ", peripheries=2";
  if (n.kept && !leaf && !n.output) attrs += ", penwidth=2";
  if (n.recomputed) attrs += ", style=\"rounded,filled,dashed\"";
  if (n.duplicated) attrs += ", style=\"rounded,filled,dotted\"";
  return cat(id, " [label=", label, attrs, "];\n");
}

// forward_only: d is the block of a stack in a step with no backward part:
// its forward part alone is drawn (the rest never runs), nothing kept or
// recomputed for a backward.
inline void append_dot(std::string& out, const step_description& d, const std::string& prefix,
                       const std::string& indent, bool forward_only = false) {
  const bool has_backward = !forward_only && d.forward_end < d.size();
  auto id = [&](std::size_t i) { return cat(prefix, "n", std::to_string(i)); };
  auto dot_node = [&](const std::string& node_id, std::size_t i, node_description n) {
    if (forward_only) n.kept = n.recomputed = false;
    return detail::dot_node(node_id, i, n);
  };
  auto group_cluster = [&](std::size_t g, const std::string& in) {
    out += cat(in, "subgraph cluster_", prefix, "g", std::to_string(g), " {\n");
    out += cat(in, "  label=", dot_label({cat("g", std::to_string(g), " ", group_title(d.group[g]))}),
               "; style=rounded; color=\"#969696\";\n");
    for (std::size_t i = 0; i < d.size(); ++i)
      if (d.node[i].group == g) out += cat(in, "  ", dot_node(id(i), i, d.node[i]));
    out += cat(in, "}\n");
  };

  for (std::size_t i = 0; i < d.size(); ++i)
    if (d.node[i].kind == node_kind::leaf) out += cat(indent, dot_node(id(i), i, d.node[i]));

  for (const bool backward : {false, true}) {
    if (backward && forward_only) continue;
    const std::string part = backward ? "backward" : "forward";
    out += cat(indent, "subgraph cluster_", prefix, part, " {\n");
    out += cat(indent, "  label=", dot_label({part}), "; style=filled; fillcolor=\"",
               backward ? "#fff5eb" : "#f7fbff", "\"; color=\"#bdbdbd\";\n");
    // Checkpoint regions (forward only), each around the groups it recomputes.
    for (std::size_t c = 0; c < d.size(); ++c) {
      if (!d.node[c].checkpoint || d.node[c].backward != backward) continue;
      out += cat(indent, "  subgraph cluster_", prefix, "region_", std::to_string(c), " {\n");
      out += cat(indent, "    label=", dot_label({cat("checkpoint region of #", std::to_string(c))}),
                 "; style=dashed; color=\"#cb181d\";\n");
      for (std::size_t g = 0; g < d.group_count(); ++g)
        if (d.group[g].region == c) group_cluster(g, indent + "    ");
      out += cat(indent, "  }\n");
    }
    for (std::size_t g = 0; g < d.group_count(); ++g)
      if (d.group[g].backward == backward && d.group[g].region == no_index) group_cluster(g, indent + "  ");
    for (std::size_t i = 0; i < d.size(); ++i) {
      const node_description& n = d.node[i];
      if (n.backward == backward && n.group == no_index && n.kind != node_kind::leaf)
        out += cat(indent, "  ", dot_node(id(i), i, n));
    }
    for (const block_description& blk : d.blocks) {
      const std::size_t r = blk.stack;
      if (d.node[r].backward != backward) continue;
      const step_description& b = *blk.step;
      const std::string block = cat(prefix, "s", std::to_string(r), "_");
      out += cat(indent, "  subgraph cluster_", block, "block {\n");
      out += cat(indent, "    label=", dot_label({block_title(r, d.node[r], has_backward)}),
                 "; style=filled; fillcolor=white;\n");
      append_dot(out, b, block, indent + "    ", !has_backward);
      out += cat(indent, "  }\n");
      for (std::size_t i = 0; i < b.size(); ++i)
        if (b.node[i].kind == node_kind::leaf && b.node[i].role == leaf_role::carry)
          out += cat(indent, "  ", id(d.child(r, 0)), " -> ", block, "n", std::to_string(i), " [style=dashed];\n");
      out += cat(indent, "  ", block, "n", std::to_string(b.forward_end - 1), " -> ", id(r), " [style=dashed, label=",
                 dot_label({cat("x", std::to_string(d.node[r].layers))}), "];\n");
    }
    out += cat(indent, "}\n");
  }

  for (std::size_t i = 0; i < d.size(); ++i)
    if (!(forward_only && d.node[i].backward))
      for (std::size_t k = 0; k < d.child_count(i); ++k) out += cat(indent, id(d.child(i, k)), " -> ", id(i), ";\n");
}

}  // namespace ctg::detail

namespace ctg::io {

// The DOT text of step's graph (see the top of this file).
template <class Step>
std::string to_dot(const Step&) {
  std::string out =
      "digraph ctg {\n"
      "  newrank=true;\n"
      "  graph [fontname=\"Helvetica\", fontsize=11];\n"
      "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", fontsize=10];\n"
      "  edge [arrowsize=0.6];\n";
  detail::append_dot(out, description<Step>, "", "  ");
  return out + "}\n";
}

}  // namespace ctg::io
