#pragma once
// ctg umbrella header: everything a user needs, in one include.
//   #include <ctg/ctg.hpp>
// The model (<ctg/model.hpp>), the lowering queries (group_count_v,
// count_groups), the CPU store, and the optimizer with its checkpoint files.
#include "model.hpp"
#include "lower/program.hpp"
#include "exec/cpu/store.hpp"
#include "optim/optim.hpp"
