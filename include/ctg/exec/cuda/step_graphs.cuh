#pragma once
// A store's steps as CUDA graphs: the launches of a step (everything between
// binding its feeds and reading its loss) are captured once their key comes
// again, and replayed as one cudaGraphLaunch from then on
// (exec/cuda/replay_cache.hpp says when). A step that draws random numbers
// (dropout) runs its launches one by one: its key is a kernel argument that
// changes every step.
//
//   store.workspace().graphs().enable(false);   // every step launch by launch
//   store.workspace().graphs().replays();       // steps replayed so far
//
// A capture that fails (an operation CUDA cannot capture, or memory that
// moved while capturing) is not an error: that step, and later ones with
// its key, run launch by launch, and captures() says so.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <ctg/exec/cuda/replay_cache.hpp>
#include <ctg/exec/cuda/runtime.cuh>

namespace ctg::cuda {

// An instantiated graph, destroyed with its owner (a graph is evicted when a
// new key comes, after the store has waited for the previous step's loss:
// never while it runs).
class graph_exec {
 public:
  graph_exec() = default;
  explicit graph_exec(cudaGraphExec_t e) : exec_(e) {}
  graph_exec(graph_exec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  graph_exec& operator=(graph_exec&& o) noexcept {
    std::swap(exec_, o.exec_);
    return *this;
  }
  ~graph_exec() {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
  }
  cudaGraphExec_t get() const { return exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

class step_graphs {
 public:
  void enable(bool on) {
    enabled_ = on;
    if (!on) cache_.clear();
  }
  bool enabled() const { return enabled_; }
  std::uint64_t captures() const { return captures_; }
  std::uint64_t failed_captures() const { return failed_; }
  std::uint64_t replays() const { return replays_; }

  // Run a step's launches (body) on `stream`: as they are, or captured, or
  // replayed, by the key of `bindings` (the step's buffer addresses and shapes).
  template <class Body>
  void run(cudaStream_t stream, std::span<const std::byte> bindings, Body&& body) {
    if (!enabled_) return body();
    key_.assign(bindings.begin(), bindings.end());
    const std::uint64_t epoch = allocation_epoch();
    const auto* e = reinterpret_cast<const std::byte*>(&epoch);
    key_.insert(key_.end(), e, e + sizeof epoch);
    auto [act, slot] = cache_.next(key_);
    if (act == cache::action::replay) {
      CTG_CUDA_CHECK(cudaGraphLaunch(slot->graph.get(), stream));
      ++replays_;
    } else if (act == cache::action::capture && capture(stream, body, *slot)) {
      CTG_CUDA_CHECK(cudaGraphLaunch(slot->graph.get(), stream));
      ++captures_;
    } else {
      body();
    }
  }

 private:
  using cache = replay_cache<graph_exec>;

  // Capture body into the slot's graph; false (the slot marked, CUDA's error
  // state cleared, nothing launched) when that fails.
  template <class Body>
  bool capture(cudaStream_t stream, Body& body, cache::slot& slot) {
    const std::uint64_t epoch = allocation_epoch();
    // Relaxed: a query such as cudaPointerGetAttributes (a stack's layers
    // bind their inputs) does not end the capture; an allocation while
    // capturing is caught by the epoch instead.
    bool ok = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess;
    if (ok) {
      try {
        body();
      } catch (...) {
        ok = false;  // (the capture is ended; run again as it is, the step reports its own errors)
      }
      cudaGraph_t graph = nullptr;
      ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && ok && graph && allocation_epoch() == epoch;
      cudaGraphExec_t exec = nullptr;
      ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
      if (graph) (void)cudaGraphDestroy(graph);
      if (ok) cache::captured(slot, graph_exec(exec));
    }
    if (!ok) {
      (void)cudaGetLastError();
      cache::capture_failed(slot);
      ++failed_;
    }
    return ok;
  }

  bool enabled_ = true;
  cache cache_;
  std::vector<std::byte> key_;  // (reused: no allocation per step once sized)
  std::uint64_t captures_ = 0, failed_ = 0, replays_ = 0;
};

}  // namespace ctg::cuda
