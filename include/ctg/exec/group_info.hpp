#pragma once
// Forwarding header: moved to <ctg/lower/group.hpp>.
#include <ctg/lower/group.hpp>
