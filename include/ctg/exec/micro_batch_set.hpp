#pragma once
// Gradient accumulation, for any backend: a store's steps come in sets of k
// micro-batches (k = 1 unless store.accumulate(k) says otherwise), whose mean
// gradient one optimizer step consumes.
//   * backward starts from 1/k instead of 1 (the loss seed), so each
//     micro-batch's gradients, and what FP8 gradient quantizers see, are
//     those of one batch of k times the size, whose loss is the mean of theirs;
//   * the first step of a set writes the gradients, the others add to them;
//   * FP8 amaxes are folded (max) over the set, and the scaling states
//     update once, when the set is complete;
//   * the optimizer takes a complete set only, and consumes it.
// This class counts; the store (exec/store.hpp) does what the count says.
#include <cstdint>
#include <string>

#include <ctg/core/error.hpp>

namespace ctg {

class micro_batch_set {
 public:
  // The next steps come in sets of k. Throws ctg::error, changing nothing,
  // for k = 0 or while a set is under way.
  void set(std::uint32_t k) {
    if (k == 0) throw error("ctg: accumulate: a set has at least 1 micro-batch, found 0");
    if (under_way())
      throw error("ctg: accumulate: " + progress() + " are accumulated; run the rest before changing the set size");
    k_ = k;
    count_ = 0;
  }
  std::uint32_t size() const { return k_; }
  std::uint32_t accumulated() const { return count_; }
  bool complete() const { return count_ == k_; }
  bool under_way() const { return count_ != 0 && count_ != k_; }
  // "2 of 4 micro-batches", for messages.
  std::string progress() const { return std::to_string(count_) + " of " + std::to_string(k_) + " micro-batches"; }

  // Where backward starts: the gradient of the mean over the set.
  double loss_seed() const { return 1.0 / static_cast<double>(k_); }
  // Does the next step's gradient start a set (write rather than add)?
  bool next_starts_set() const { return count_ == 0 || count_ == k_; }
  // A step committed.
  void count_step() { count_ = next_starts_set() ? 1 : count_ + 1; }
  // The optimizer applied a complete set.
  void consume() { count_ = 0; }
  // Back to an earlier count (a replica group's round of runs undone: basic_store::return_to).
  void rewind(std::uint32_t count) { count_ = count; }

 private:
  std::uint32_t k_ = 1, count_ = 0;
};

}  // namespace ctg
