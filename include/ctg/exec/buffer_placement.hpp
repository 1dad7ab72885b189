#pragma once
// Placing buffer lives in one memory region: buffers whose lives (program
// positions, inclusive) do not overlap may share bytes. First fit, in the
// order the lives begin: simple, deterministic, and within a small factor of
// the best placement for the interval graphs a step's buffers form.
#include <cstddef>
#include <vector>

#include <ctg/core/error.hpp>

namespace ctg::detail {

struct buffer_life {
  std::size_t begin = 0, end = 0;  // positions, inclusive
  std::size_t bytes = 0;           // a multiple of 64
};

// Writes each life's offset (lives sorted by begin) and returns the region's size.
inline std::size_t place_lives(const buffer_life* lives, std::size_t count, std::size_t* offset) {
  struct placed {
    std::size_t offset, bytes, end;
  };
  std::vector<placed> active;  // sorted by offset
  active.reserve(count);
  std::size_t size = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const buffer_life& l = lives[i];
    std::erase_if(active, [&](const placed& a) { return a.end < l.begin; });
    std::size_t at = 0, slot = 0;
    for (; slot < active.size(); ++slot) {
      if (at + l.bytes <= active[slot].offset) break;
      if (active[slot].offset + active[slot].bytes > at) at = active[slot].offset + active[slot].bytes;
    }
    if (at > (std::size_t{1} << 62) - l.bytes)  // (each buffer is below 2^62 bytes: buffers.hpp)
      throw error("ctg: size overflows: the run's buffers together are past 2^62 bytes");
    active.insert(active.begin() + static_cast<std::ptrdiff_t>(slot), placed{at, l.bytes, l.end});
    offset[i] = at;
    if (at + l.bytes > size) size = at + l.bytes;
  }
  return size;
}

}  // namespace ctg::detail
