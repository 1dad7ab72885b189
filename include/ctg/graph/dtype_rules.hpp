#pragma once
// Forwarding header: the dtype rules live in core/ (they depend on nothing above it).
#include <ctg/core/dtype_rules.hpp>
