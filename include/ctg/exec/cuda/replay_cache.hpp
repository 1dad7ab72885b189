#pragma once
// Which of a store's steps run their launches one by one, which are captured
// into a CUDA graph, and which replay one: plain host code (no CUDA header),
// tested on the CPU (tests/unit/step_replay.cpp); the CUDA side is
// exec/cuda/step_graphs.cuh.
//
// A step is known by its key: the bytes every launch's arguments come from
// (each buffer's address and shape, and how many times device memory was
// allocated or freed). The first step with a key runs as it is (it may still
// size memory, and choose cuBLASLt algorithms); the next step with the same
// key is captured and launched as a graph; later ones replay that graph.
// Two keys are kept: a store's first output alternates between two buffers,
// so a steady run of steps alternates between two keys. A key whose capture
// failed is not captured again (its steps run as they are).
#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace ctg::cuda {

// Graph: an instantiated graph (movable; default-constructed: none).
template <class Graph>
class replay_cache {
 public:
  enum class action { run, capture, replay };
  struct slot {
    std::vector<std::byte> key;
    Graph graph{};
    bool has_graph = false;
    bool capture_failed = false;
  };
  static constexpr std::size_t capacity = 2;

  // What to do for a step with this key, and the slot it uses (its graph,
  // once captured, goes there: captured() or capture_failed()).
  std::pair<action, slot*> next(std::span<const std::byte> key) {
    for (slot& s : slots_) {
      if (!same(s.key, key)) continue;
      if (s.has_graph) return {action::replay, &s};
      return {s.capture_failed ? action::run : action::capture, &s};
    }
    if (slots_.size() == capacity) slots_.erase(slots_.begin());  // the oldest key
    slots_.push_back(slot{std::vector<std::byte>(key.begin(), key.end())});
    return {action::run, &slots_.back()};
  }
  static void captured(slot& s, Graph g) {
    s.graph = std::move(g);
    s.has_graph = true;
  }
  static void capture_failed(slot& s) { s.capture_failed = true; }

  void clear() { slots_.clear(); }

 private:
  static bool same(const std::vector<std::byte>& a, std::span<const std::byte> b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  std::vector<slot> slots_;
};

}  // namespace ctg::cuda
