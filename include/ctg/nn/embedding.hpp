#pragma once
// embedding: rows of a [vocab, dim] table picked by i32 ids. Its gradient is a
// scatter-add, so repeated ids accumulate. Parameter "<name>.weight".
#include <ctg/precision/policy.hpp>

namespace ctg::nn {

template <fixed_string Name, dim_t Vocab, dim_t Dim, precision::policy P, leaf_role Role = leaf_role::param,
          expr Ids>
constexpr auto embedding(Ids ids) {
  return gather(leaf_node<Name + ".weight", typename P::param_type, Role, Vocab, Dim>{}, ids);
}

}  // namespace ctg::nn
