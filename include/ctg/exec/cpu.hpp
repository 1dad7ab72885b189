#pragma once
// Forwarding header: the CPU backend is <ctg/exec/cpu/store.hpp>.
#include <ctg/exec/cpu/store.hpp>
