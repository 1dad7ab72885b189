#pragma once
// Host copies of values the host cannot read in place (a GPU store's): each
// filled when it is made (what a save writes), and copied back where it came
// from by put_back() (after a load has written it). io/checkpoint.hpp's
// record_list and io/safetensors.hpp both keep their copies here.
#include <cstddef>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace ctg::detail {

class host_copies {
 public:
  // A host copy of `count` T's: fetch(std::span<T>) fills it now, and
  // put(std::span<const T>) copies it back at put_back().
  template <class T, class Fetch, class Put>
  std::span<T> add(std::size_t count, Fetch&& fetch, Put put) {
    std::vector<std::byte>& copy = copies_.emplace_back(count * sizeof(T));
    const std::span<T> values(reinterpret_cast<T*>(copy.data()), count);
    std::forward<Fetch>(fetch)(values);
    then(std::function<void()>([put = std::move(put), values] { put(std::span<const T>(values)); }));
    return values;
  }
  // Something else put_back() does, in turn with the copies.
  void then(std::function<void()> action) { put_back_.push_back(std::move(action)); }
  void put_back() const {
    for (const auto& put : put_back_) put();
  }

 private:
  std::vector<std::vector<std::byte>> copies_;  // (each copy's bytes stay where they are)
  std::vector<std::function<void()>> put_back_;
};

}  // namespace ctg::detail
