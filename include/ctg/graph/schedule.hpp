#pragma once
// Forwarding header: moved to <ctg/lower/schedule.hpp>.
#include <ctg/lower/schedule.hpp>
