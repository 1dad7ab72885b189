#pragma once
// Small, flat type-list utilities. Everything is a pack expansion or a fold:
// no recursion over list length, so instantiation depth stays constant.
#include <cstddef>
#include <initializer_list>
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

namespace detail {
// A list's size lives in a base named by the count alone: a static member of
// list<Ts...> itself would be a variable whose mangled name spells the list,
// one per list a step's passes build (core/type_list.hpp's note below).
template <std::size_t N>
struct list_size {
  static constexpr std::size_t size = N;
};
}  // namespace detail

template <class... Ts>
struct list : detail::list_size<sizeof...(Ts)> {};

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

}  // namespace ctg::tl

// Membership and position as types (std::bool_constant, std::integral_constant)
// named by the return type of a function that is declared, never defined or
// called: a variable or function template per (T, list) would be an entity
// whose mangled name spells the whole list, and g++ mangles every entity it
// registers, at a cost that grows with the square of the name's length (a
// step's node list: tens of kilobytes per name, a third of a unit's time).
namespace ctg::detail {
// The position of the first true flag (the count of flags when none is).
constexpr std::size_t first_true(std::initializer_list<bool> flags) {
  std::size_t i = 0;
  for (bool f : flags) {
    if (f) return i;
    ++i;
  }
  return i;
}
template <class T, class... Ts>
auto contained_in(tl::list<Ts...>) -> std::bool_constant<(CTG_SAME(T, Ts) || ...)>;
template <class T, class... Ts>
auto position_in(tl::list<Ts...>) -> std::integral_constant<std::size_t, first_true({CTG_SAME(T, Ts)...})>;
}  // namespace ctg::detail

namespace ctg::tl {
// Is T in List: tl::contains<T, List>::value.
template <class T, class List>
using contains = decltype(::ctg::detail::contained_in<T>(List{}));
// T's position in List, whose elements are unique (List's size when T is not in it).
template <class T, class List>
using index_of = decltype(::ctg::detail::position_in<T>(List{}));

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
// Eight at a time, so the depth of the recursion is an eighth of the count
// (a step's node list is hundreds long; nvcc 13's front end stops at about 200).
template <class... A0, class... A1, class... A2, class... A3, class... A4, class... A5, class... A6, class... A7,
          class... Rest>
struct concat<list<A0...>, list<A1...>, list<A2...>, list<A3...>, list<A4...>, list<A5...>, list<A6...>,
              list<A7...>, Rest...>
    : concat<list<A0..., A1..., A2..., A3..., A4..., A5..., A6..., A7...>, Rest...> {};
template <class... Lists>
using concat_t = typename concat<Lists...>::type;

// Append T unless already present.
template <class List, class T>
using add_unique_t = std::conditional_t<contains<T, List>::value, List, typename push_back<List, T>::type>;

// Apply a list's elements to a template.
template <template <class...> class F, class List>
struct apply;
template <template <class...> class F, class... Ts>
struct apply<F, list<Ts...>> {
  using type = F<Ts...>;
};

// f.template operator()<K, T>() for the K-th type T of List, in order (one
// pack expansion: no recursion).
template <class List, class F>
constexpr void for_each_indexed(F&& f) {
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    (f.template operator()<K, at_t<K, List>>(), ...);
  }(std::make_index_sequence<List::size>{});
}

}  // namespace ctg::tl
