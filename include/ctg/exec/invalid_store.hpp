#pragma once
// What make_store gives for an invalid_step (a value_and_grad or forward
// whose check failed, already reported): a store that takes every use a real
// one does (exec/store.hpp) and does nothing, so the user's next lines (param,
// grad, the step, init_params, the optimizer, save) add no errors to the one
// that matters.
#include <cstddef>
#include <cstdint>
#include <span>

#include <ctg/graph/step.hpp>

namespace ctg {

struct invalid_store {
  using step_type = invalid_step;
  using backend_type = void;
  static constexpr bool runs_every_step = true;  // (a make_store given a mistake: its steps run on it)
  template <class L>
  std::span<typename L::dtype> param() { return {}; }
  template <class L>
  std::span<const typename L::dtype> grad() { return {}; }
  template <class L>
  std::span<typename L::dtype> param(L) { return {}; }
  template <class L>
  std::span<const typename L::dtype> grad(L) { return {}; }
  template <class L, class Host>
  void upload(L, const Host&) {}
  template <class L, class Host>
  void download(L, Host&&) {}
  template <class L, class Host>
  void download_grad(L, Host&&) {}
  template <class Host>
  void download_value(Host&&) {}
  template <class Step, class Host>
  void download_value(const Step&, Host&&) {}
  std::size_t value_count() const { return 0; }
  template <class Step>
  std::size_t value_count(const Step&) const {
    return 0;
  }
  std::span<const float> value() const { return {}; }
  template <class Step>
  std::span<const float> value(const Step&) const {
    return {};
  }
  void seed(std::uint64_t) {}
  std::uint64_t seed() const { return 0; }
  std::uint64_t steps_run() const { return 0; }
  void set_steps_run(std::uint64_t) {}
  void check_finite(bool) {}
  void accumulate(std::uint32_t) {}
  std::uint32_t micro_batches() const { return 1; }
  std::uint32_t accumulated() const { return 1; }
  void consume_grads() {}
  // (What an optimizer's update holds: nothing here. Not trivial, as the real one, so no unused-variable warning.)
  struct held {
    ~held() {}
  };
  held hold_alone() { return {}; }
  template <class... Feeds>
  float run(const Feeds&...) { return 0.0f; }
  template <class... Feeds>
  std::size_t plan(const Feeds&...) { return 0; }
  std::size_t kept_bytes() const { return 0; }
  std::size_t scratch_bytes() const { return 0; }
};

}  // namespace ctg
