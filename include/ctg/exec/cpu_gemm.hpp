#pragma once
// Forwarding header: moved to <ctg/exec/cpu/gemm.hpp>.
#include <ctg/exec/cpu/gemm.hpp>
