#pragma once
// Forwarding header: moved to <ctg/lower/loop_layout.hpp>.
#include <ctg/lower/loop_layout.hpp>
