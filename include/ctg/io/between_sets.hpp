#pragma once
// A file (a checkpoint, safetensors) is written or read between sets of
// micro-batches only: a set under way holds gradients and FP8 amaxes that no
// file keeps. And a load replaces the values a complete set's gradients were
// taken at: no optimizer may apply those gradients to the loaded values.
#include <string>

#include <ctg/core/error.hpp>

namespace ctg::detail {

// where: the file's message head ("ctg: state file '<path>': ").
template <class Store>
void check_between_sets(const Store& s, const std::string& where) {
  if constexpr (requires { s.accumulated(); s.micro_batches(); })
    if (s.accumulated() != 0 && s.accumulated() != s.micro_batches())
      throw error(where + "the store is in the middle of a set of micro-batches (" + std::to_string(s.accumulated()) +
                  " of " + std::to_string(s.micro_batches()) +
                  "), whose gradients and FP8 amaxes a file does not keep: save or load between sets");
}

// After a load: the gradients of the values replaced are spent (an
// optimizer's next step says there are none, as after an update).
template <class Store>
void drop_replaced_grads(Store& s) {
  if constexpr (requires { s.drop_grads(); }) s.drop_grads();
}

}  // namespace ctg::detail
