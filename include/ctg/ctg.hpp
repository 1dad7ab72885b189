#pragma once
// ctg umbrella header: everything a user needs, in one include.
//   #include <ctg/ctg.hpp>
// The model (<ctg/model.hpp>), the lowering queries (group_count_v,
// count_groups), the CPU store (and one store over a training step and its
// evaluation steps), and the optimizer (AdamW, learning-rate
// schedules). Checkpoint files, whose file-system headers cost every unit
// about 0.3 s to parse, come with <ctg/optim/optim.hpp> or <ctg/io/checkpoint.hpp>.
#include "model.hpp"
#include "lower/program.hpp"
#include "exec/cpu/store.hpp"
#include "exec/shared_store.hpp"
#include "dist/shard.hpp"
#include "dist/data_parallel.hpp"
#include "dist/sharded_adamw.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
