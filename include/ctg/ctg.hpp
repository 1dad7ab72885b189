#pragma once
// ctg umbrella header: everything a user needs, in one include.
//   #include <ctg/ctg.hpp>
// Each area adds its public header here when it lands.

#include "core/config.hpp"
#include "core/dtypes.hpp"
#include "graph/graph.hpp"
#include "exec/cpu.hpp"
#include "nn/nn.hpp"
#include "precision/policy.hpp"
#include "precision/fp8_policy.hpp"
