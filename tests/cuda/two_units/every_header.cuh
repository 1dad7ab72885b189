#pragma once
// Every .cuh header of ctg (tests/cuda/two_units/first.cu says why).
#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/attention_kernels.cuh>
#include <ctg/exec/cuda/attention_mma_kernels.cuh>
#include <ctg/exec/cuda/data_kernels.cuh>
#include <ctg/exec/cuda/fused_kernel.cuh>
#include <ctg/exec/cuda/gemm.cuh>
#include <ctg/exec/cuda/group_clock.cuh>
#include <ctg/exec/cuda/runtime.cuh>
#include <ctg/exec/cuda/step_graphs.cuh>
#include <ctg/exec/cuda/store.cuh>
#include <ctg/exec/cuda/workspace.cuh>
#include <ctg/optim/cuda/adamw.cuh>
