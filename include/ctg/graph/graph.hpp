#pragma once
// The typed graph: leaves, ops, compile-time queries, autodiff and stacks.
#include <ctg/graph/autodiff.hpp>
#include <ctg/graph/fp8.hpp>
#include <ctg/graph/node.hpp>
#include <ctg/graph/ops.hpp>
#include <ctg/graph/stack.hpp>
#include <ctg/graph/traits.hpp>
