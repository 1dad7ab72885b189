#pragma once
// ctg optimizers: AdamW with f32 master weights, learning-rate schedules, and
// saving / loading parameters and optimizer state.
#include <ctg/optim/adamw.hpp>
#include <ctg/optim/lr_schedule.hpp>
#include <ctg/optim/state_file.hpp>
