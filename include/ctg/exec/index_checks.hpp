#pragma once
// Index tensors (token ids, targets) are fed inputs, read by gather and
// one_hot, so their values are checked here, on the host, from the feeds,
// before a step runs anything, for every backend: an id outside an
// embedding's rows, or a target outside the classes that is not the ignored
// index, is a ctg::error naming the input, the position and the value, and the
// step changes nothing. The runners read ids unchecked.
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
  dim_t count = 0;        // ids must be in [0, count) ...
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

// (By node index, not node type: see step_key in graph/step.hpp.)
template <class Key, std::size_t I, class L>
[[noreturn]] void throw_bad_id(dim_t position, i32 value) {
  using nodes = typename step_of<Key>::nodes;
  constexpr id_rule r = id_rule_of<tl::at_t<I, nodes>>();
  std::string range;
  if constexpr (tl::at_t<I, nodes>::kind == node_kind::gather) {
    using table = tl::at_t<0, typename tl::at_t<I, nodes>::children>;
    range = std::to_string(r.count) + " rows of ";
    if constexpr (is_leaf_v<table>) range += std::string("'") + table::name.c_str() + "'";
    else range += "a table";
  } else {
    range = std::to_string(r.count) + " classes";
    if constexpr (r.has_ignore) range += " and is not the ignored index " + std::to_string(r.ignore);
  }
  throw error("ctg: index " + std::to_string(value) + " at position " + std::to_string(position) + " of input '" +
              L::name.c_str() + "' is outside the " + range);
}

// Every id every node of step Key reads, checked in the feeds.
template <class Key, class... Feeds>
void check_ids(const Feeds&... feeds) {
  using nodes = typename step_of<Key>::nodes;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    auto node = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      constexpr id_rule r = id_rule_of<tl::at_t<J, nodes>>();
      if constexpr (r.reads_ids && r.count != dyn) {
        using L = typename decltype(id_source<tl::at_t<r.child, typename tl::at_t<J, nodes>::children>>())::type;
        auto feed = [&](const auto& f) {
          if constexpr (std::is_same_v<typename std::decay_t<decltype(f)>::leaf, L>)
            for (std::size_t i = 0; i < f.data.size(); ++i) {
              const i32 id = f.data[i];
              if (!((id >= 0 && id < r.count) || (r.has_ignore && id == r.ignore)))
                throw_bad_id<Key, J, L>(static_cast<dim_t>(i), id);
            }
        };
        (feed(feeds), ...);
      }
    };
    (node(std::integral_constant<std::size_t, I>{}), ...);
    (void)node;
  }(std::make_index_sequence<nodes::size>{});
}

}  // namespace ctg::detail
