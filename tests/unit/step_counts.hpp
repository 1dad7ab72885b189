#pragma once
// What a step's graph holds, counted for tests: products summed over their
// batches (matmul_node's and fp8_matmul_node's SumBatches), reductions, and
// nodes by the op a graph's text names them by.
//
//   step_counts::summed_products<Step>                          // matmul summed
//   step_counts::summed_products<Step, ctg::node_kind::fp8_matmul>
//   step_counts::reductions<Step>
//   step_counts::ops_named<Step>("matmul summed")
#include <cstddef>
#include <string_view>

#include <ctg/ctg.hpp>
#include <ctg/lower/describe.hpp>

namespace step_counts {

// Is node N a product of kind Kind summed over its batches?
template <ctg::node_kind Kind, class N>
constexpr bool is_summed_product() {
  if constexpr (N::kind == Kind && (Kind == ctg::node_kind::matmul || Kind == ctg::node_kind::fp8_matmul))
    return N::sum_batches;
  else
    return false;
}

template <class Step, ctg::node_kind Kind = ctg::node_kind::matmul>
constexpr std::size_t summed_products = []<class... Ns>(ctg::tl::list<Ns...>) {
  return (std::size_t(0) + ... + std::size_t(is_summed_product<Kind, Ns>()));
}(typename Step::nodes{});

template <class Step>
constexpr std::size_t reductions = []<class... Ns>(ctg::tl::list<Ns...>) {
  return (std::size_t(0) + ... + std::size_t(Ns::kind == ctg::node_kind::reduce));
}(typename Step::nodes{});

template <class Step>
constexpr std::size_t ops_named(std::string_view op) {
  const ctg::step_description& d = ctg::description<Step>;
  std::size_t n = 0;
  for (std::size_t i = 0; i < d.size(); ++i) n += d.node[i].op == op;
  return n;
}

}  // namespace step_counts
