#pragma once
// Forwarding header: moved to <ctg/lower/program.hpp>.
#include <ctg/lower/program.hpp>
