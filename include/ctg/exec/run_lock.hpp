#pragma once
// A store runs one step, or one optimizer update, at a time: its feeds,
// buffers, scratch and threads serve one run. A second that begins while
// one is under way (another thread's: on the same store, or on a store of
// the same parameters, make_store(dev, train, eval)) is refused with a
// ctg::error, where it would write the first one's buffers and both would
// return wrong values, or crash.
#include <atomic>
#include <memory>

#include <ctg/core/error.hpp>

namespace ctg::detail {

class run_lock {
 public:
  // Held for one run or update; released however it ends.
  class held {
   public:
    explicit held(std::atomic<bool>& busy) : busy_(busy) {}
    held(const held&) = delete;
    held& operator=(const held&) = delete;
    ~held() { busy_.store(false, std::memory_order_release); }

   private:
    std::atomic<bool>& busy_;
  };

  [[nodiscard]] held enter() {
    if (busy_->exchange(true, std::memory_order_acquire))
      throw error("ctg: this store is running a step or an optimizer update already (on another thread): a store, "
                  "with the steps that share its parameters, runs one at a time");
    return held(*busy_);
  }
  // `other` is held whenever this is (a store sharing this one's parameters).
  void share_with(run_lock& other) const { other.busy_ = busy_; }

 private:
  // (On the heap: a store moved keeps the lock its sharing steps hold.)
  std::shared_ptr<std::atomic<bool>> busy_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace ctg::detail
