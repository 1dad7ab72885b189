#pragma once
// A string usable as a template argument: leaves are named at compile time,
// e.g. ctg::param<"mlp.w1", ...>.
#include <cstddef>

namespace ctg {

template <std::size_t N>
struct fixed_string {
  char chars[N]{};  // includes the terminating '\0'

  constexpr fixed_string() = default;
  constexpr fixed_string(const char (&s)[N]) {
    for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
  }
  static constexpr std::size_t size() { return N - 1; }
  constexpr const char* c_str() const { return chars; }

  template <std::size_t M>
  constexpr bool operator==(const fixed_string<M>& other) const {
    if constexpr (M != N) {
      return false;
    } else {
      for (std::size_t i = 0; i < N; ++i)
        if (chars[i] != other.chars[i]) return false;
      return true;
    }
  }
};

// Names compose at compile time: param<Prefix + ".weight", ...>.
template <std::size_t N, std::size_t M>
constexpr fixed_string<N + M - 1> operator+(const fixed_string<N>& a, const fixed_string<M>& b) {
  fixed_string<N + M - 1> r;
  for (std::size_t i = 0; i + 1 < N; ++i) r.chars[i] = a.chars[i];
  for (std::size_t i = 0; i < M; ++i) r.chars[N - 1 + i] = b.chars[i];
  return r;
}
template <std::size_t N, std::size_t M>
constexpr fixed_string<N + M - 1> operator+(const fixed_string<N>& a, const char (&b)[M]) {
  return a + fixed_string<M>(b);
}

// A run-time view of a compile-time name that needs no <string>.
struct name_view {
  const char* data;
  std::size_t size;
};

}  // namespace ctg
