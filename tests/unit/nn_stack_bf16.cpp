// See nn_stack.cpp: the same comparison under the autocast<bf16> policy.
#include "nn_model_common.hpp"

using namespace nn_model;

TEST_CASE("stack<1, transformer block> equals the unrolled block, autocast<bf16>: loss and gradients bit for bit") {
  stack_equals_unrolled<ctg::precision::autocast<ctg::bf16>>();
}
