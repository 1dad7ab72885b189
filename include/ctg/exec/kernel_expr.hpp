#pragma once
// Forwarding header: moved to <ctg/lower/kernel_expr.hpp>.
#include <ctg/lower/kernel_expr.hpp>
