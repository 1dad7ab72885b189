#pragma once
// Small, flat type-list utilities. Everything is a pack expansion or a fold:
// no recursion over list length, so instantiation depth stays constant.
#include <cstddef>
#include <type_traits>
#include <utility>

// Whether A and B are the same type, without instantiating std::is_same_v<A,
// B>: graph passes compare every pair of a step's node types, and a variable
// template specialization per pair cost more than half of a transformer
// step's compile time (16.6 s -> 4.9 s of g++ time for its graph and autodiff).
#if defined(__has_builtin)
#if __has_builtin(__is_same)
#define CTG_SAME(A, B) __is_same(A, B)
#endif
#endif
#ifndef CTG_SAME
#define CTG_SAME(A, B) std::is_same_v<A, B>
#endif

namespace ctg::tl {

template <class... Ts>
struct list {
  static constexpr std::size_t size = sizeof...(Ts);
};

template <class T, class List>
inline constexpr bool contains_v = false;
template <class T, class... Ts>
inline constexpr bool contains_v<T, list<Ts...>> = (CTG_SAME(T, Ts) || ...);

// Indexing in O(1) instantiations: overload resolution over an inheritance set.
}  // namespace ctg::tl

namespace ctg::detail {
template <std::size_t I, class T>
struct type_slot {};
template <class Seq, class... Ts>
struct type_slots;
template <std::size_t... I, class... Ts>
struct type_slots<std::index_sequence<I...>, Ts...> : type_slot<I, Ts>... {};

template <std::size_t I, class T>
std::type_identity<T> at_impl(type_slot<I, T>);
}  // namespace ctg::detail

namespace ctg::tl {

template <class List>
struct indexed;
template <class... Ts>
struct indexed<list<Ts...>> : ::ctg::detail::type_slots<std::index_sequence_for<Ts...>, Ts...> {};

template <std::size_t I, class List>
using at_t = typename decltype(::ctg::detail::at_impl<I>(indexed<List>{}))::type;

// Position of T in a list whose elements are unique (a fold, not deduction:
// g++ 12 crashes deducing through class-type template arguments).
}  // namespace ctg::tl

namespace ctg::detail {
template <class T, class... Ts>
consteval std::size_t find(tl::list<Ts...>) {
  constexpr bool hit[] = {CTG_SAME(T, Ts)..., false};
  std::size_t i = 0;
  while (i < sizeof...(Ts) && !hit[i]) ++i;
  return i;
}
}  // namespace ctg::detail

namespace ctg::tl {
template <class T, class List>
inline constexpr std::size_t index_of_v = ::ctg::detail::find<T>(List{});

template <class List, class T>
struct push_back;
template <class... Ts, class T>
struct push_back<list<Ts...>, T> {
  using type = list<Ts..., T>;
};

// Concatenation of any number of lists.
template <class... Lists>
struct concat {
  using type = list<>;
};
template <class... As>
struct concat<list<As...>> {
  using type = list<As...>;
};
template <class... As, class... Bs, class... Rest>
struct concat<list<As...>, list<Bs...>, Rest...> : concat<list<As..., Bs...>, Rest...> {};
template <class... Lists>
using concat_t = typename concat<Lists...>::type;

// Append T unless already present.
template <class List, class T>
using add_unique_t = std::conditional_t<contains_v<T, List>, List, typename push_back<List, T>::type>;

// Apply a list's elements to a template.
template <template <class...> class F, class List>
struct apply;
template <template <class...> class F, class... Ts>
struct apply<F, list<Ts...>> {
  using type = F<Ts...>;
};

}  // namespace ctg::tl
