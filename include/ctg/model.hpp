#pragma once
// The model half of ctg, with no backend: dtypes, the typed graph, autodiff,
// precision policies and layers. Enough to build a model's and a step's
// types and check them at compile time (.cu files, compile-fail tests);
// running a step needs a store (<ctg/ctg.hpp>).
#include "core/config.hpp"
#include "core/dtypes.hpp"
#include "graph/graph.hpp"
#include "nn/nn.hpp"
#include "precision/fp8_policy.hpp"
#include "precision/policy.hpp"
