#pragma once
// Index tensors (token ids, targets) are fed inputs, read by gather and
// one_hot, so their values are checked here, on the host, from the feeds (ids
// fed in a GPU's memory are copied to the host for it),
// once the feeds are bound and the run-time shapes resolved (a table of
// ctg::dyn rows has its count then), before a step runs anything, for every
// backend: an id outside an embedding's rows, or a target outside the
// classes that is not the ignored index, is a ctg::error naming the input,
// the position and the value, and the step changes nothing. The runners
// read ids unchecked.
#include <array>
#include <span>
#include <string>
#include <type_traits>

#include <ctg/core/error.hpp>
#include <ctg/exec/feed.hpp>
#include <ctg/graph/step.hpp>

namespace ctg::detail {

// The input an index tensor's values come from: it is one, or a view of one.
template <class N>
consteval auto id_source() {
  if constexpr (is_leaf_v<N>) return std::type_identity<N>{};
  else return id_source<tl::at_t<0, typename N::children>>();
}

// What node N requires of the ids it reads, if it reads any.
struct id_rule {
  bool reads_ids = false;
  std::size_t child = 0;  // which child holds the ids
  dim_t count = 0;        // ids must be in [0, count) (ctg::dyn: a table's rows, known at run time) ...
  bool has_ignore = false;
  int ignore = 0;         // ... or equal this
};
template <class N>
consteval id_rule id_rule_of() {
  if constexpr (N::kind == node_kind::gather) {
    return {true, 1, tl::at_t<0, typename N::children>::dims::dims[0]};
  } else if constexpr (N::kind == node_kind::elementwise && requires { N::op::id_count; }) {
    return {true, 0, N::op::id_count, N::op::has_ignore, N::op::ignore};  // one_hot
  } else {
    return {};
  }
}

// One node's rule over the ids of one input, with what its message names.
struct id_check {
  std::size_t source = 0;  // the input holding the ids (node index)
  id_rule rule{};
  bool gather = false;          // ids of a gather's table (else one_hot's classes)
  const char* table = nullptr;  // a gather's table leaf name (null: a computed table)
  std::size_t table_node = 0;   // a gather's table (node index): its run-time rows, for a count of ctg::dyn
};

// Does node N read ids (a rule to check)? (one_hot's classes are static.)
template <class N>
consteval bool checks_ids() {
  constexpr id_rule r = id_rule_of<N>();
  return r.reads_ids && (r.count != dyn || N::kind == node_kind::gather);
}
// Node N's rule, appended at out when it has one (Key: the step's key; per
// node, nothing is instantiated on the step's node list, core/type_list.hpp).
template <class Key, class N>
constexpr void append_id_check(id_check*& out) {
  if constexpr (checks_ids<N>()) {
    constexpr id_rule r = id_rule_of<N>();
    using ids = tl::at_t<r.child, typename N::children>;
    using source = typename decltype(id_source<ids>())::type;
    using nodes = typename step_of<Key>::nodes;
    id_check c{tl::index_of<source, nodes>::value, r, N::kind == node_kind::gather};
    if constexpr (N::kind == node_kind::gather) {
      using table = tl::at_t<0, typename N::children>;
      c.table_node = tl::index_of<table, nodes>::value;
      if constexpr (is_leaf_v<table>) c.table = table::name.c_str();
    }
    *out++ = c;
  }
}
template <class Key, class... Ns>
consteval auto make_id_checks(tl::list<Ns...>) {
  std::array<id_check, (std::size_t(0) + ... + checks_ids<Ns>())> checks{};
  id_check* out = checks.data();
  (append_id_check<Key, Ns>(out), ...);
  return checks;
}

// The rules of every node of step Key that reads ids, computed once.
template <class Key>
inline constexpr auto id_checks_of = make_id_checks<Key>(typename step_of<Key>::nodes{});

// The ids of input `input` against one rule, whose table has `count` rows
// (or classes): the first one outside it is a ctg::error.
inline void check_ids_against(const id_check& c, dim_t count, const char* input, const i32* ids, std::size_t n) {
  const id_rule& r = c.rule;
  for (std::size_t i = 0; i < n; ++i) {
    const i32 id = ids[i];
    if ((id >= 0 && id < count) || (r.has_ignore && id == r.ignore)) continue;
    std::string range;
    if (c.gather) {
      range = std::to_string(count) + " rows of ";
      range += c.table ? std::string("'") + c.table + "'" : std::string("a table");
    } else {
      range = std::to_string(count) + " classes";
      if (r.has_ignore) range += " and is not the ignored index " + std::to_string(r.ignore);
    }
    throw error("ctg: index " + std::to_string(id) + " at position " + std::to_string(i) + " of input '" + input +
                "' is outside the " + range);
  }
}

// Every id every node of step Key reads, checked in the feeds. host_ids(span)
// gives the fed ids readable on the host (a copy, for ids fed in device
// memory); shapes: every node's run-time shape (resolved for these feeds).
template <class Key, class HostIds, class... Feeds>
void check_ids(const HostIds& host_ids, const rt_shape* shapes, const Feeds&... feeds) {
  auto feed = [&]<class L>(const feed_t<L>& f) {
    if constexpr (index_type<typename L::dtype>) {
      constexpr std::size_t source = tl::index_of<L, typename step_of<Key>::nodes>::value;
      bool any = false;
      for (const id_check& c : id_checks_of<Key>) any = any || c.source == source;
      if (!any) return;
      const std::span<const i32> ids = host_ids(f.data);
      for (const id_check& c : id_checks_of<Key>)
        if (c.source == source) {
          const dim_t count = c.rule.count != dyn ? c.rule.count : shapes[c.table_node].d[0];
          check_ids_against(c, count, L::name.c_str(), ids.data(), ids.size());
        }
    }
  };
  (feed(feeds), ...);
  (void)feed;
}

}  // namespace ctg::detail
