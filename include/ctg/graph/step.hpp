#pragma once
// What a compiled step is: the graph of its outputs (the loss, or a forward
// value, then one gradient per wrt leaf), the leaves it differentiates with
// respect to, whether it fuses, and where its forward part ends. A store
// runs it (exec/store.hpp); ctg::value_and_grad (graph/autodiff.hpp) and
// ctg::forward make one.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <ctg/graph/traits.hpp>

namespace ctg {

template <class... Leaves>
struct wrt_t {};
// The leaves to differentiate with respect to: ctg::wrt<W1, W2>.
template <class... Leaves>
inline constexpr wrt_t<Leaves...> wrt{};

namespace detail {
// Does Store run Step: the step it was made for, or, for a store over several
// steps (exec/shared_store.hpp: Store::steps), one of them? And what runs it.
template <class Store, class Step>
consteval bool store_runs() {
  if constexpr (requires { Store::runs_every_step; }) return true;  // (exec/invalid_store.hpp)
  else if constexpr (requires { typename Store::steps; }) return tl::contains<Step, typename Store::steps>::value;
  else return std::is_same_v<typename Store::step_type, Step>;
}
template <class Step, class Store>
auto& runner_of(Store& store) {
  if constexpr (requires { typename Store::steps; }) return store.template runner<Step>();
  else return store;
}
}  // namespace detail

// What running a step returns: its root's first element, as a double when
// the root is f64 (a float would drop half its digits), else as a float.
template <class Root>
using step_result_t = std::conditional_t<std::is_same_v<typename Root::dtype, f64>, double, float>;

namespace detail {
// A step's outputs: its root, then the gradient of the root with respect to
// each wrt leaf (graph/autodiff.hpp defines it).
template <class Root, class Wrt>
struct step_outputs;
}  // namespace detail

// A compiled step, run by a store on some device: Root (the loss, or a
// forward value) and the gradient of Root with respect to each Wrt leaf.
// The step's type names only Root, its leaves and flags, never the backward
// graph, which autodiff derives from them: so does every name a compiler
// prints or mangles for the step's runtime (half the compile time went to
// mangling names that spelled the backward graph).
// Fuse = false gives every node its own buffer and loop: the unfused
// reference that fused execution is tested against. The forward part of the
// step is ForwardRoot and every node it reads (by default: Root); the rest is
// the backward part.
template <class Root, class Wrt, bool Fuse = true, class ForwardRoot = Root>
struct graph_step {
  using root = Root;
  using outputs = typename detail::step_outputs<Root, Wrt>::type;
  using wrt = Wrt;
  using forward_root = ForwardRoot;
  // A step whose forward root is another node (a stack block's backward,
  // graph/stack.hpp, whose root is the vjp loss sum(out * g), there for
  // autodiff to derive the gradients from) does not compute its root:
  // nothing reads it (lower/schedule.hpp leaves it to no group).
  static constexpr bool root_is_output = CTG_SAME(Root, ForwardRoot);
  static constexpr bool fuse = Fuse;
  using nodes = topo_t<outputs>;
  // The output holding the gradient of wrt leaf L (the outputs are the loss,
  // then one gradient per wrt leaf, in wrt order).
  template <class L>
  static constexpr std::size_t grad_output = 1 + tl::index_of<L, Wrt>::value;
  static_assert(detail::check_leaf_names<nodes>());  // (reports a clash itself, naming both leaves)
  static_assert(detail::check_dropout_names<nodes>());

  // A store runs the steps it was made for and no other: another step on it
  // (an evaluation step, unfused(step), a step of another model) would run
  // the store's own step, or read buffers laid out for another graph.
  // Each input's data comes as a feed (exec/feed.hpp: ctg::feed<X>(data,
  // sizes...), whose type names its leaf); a bare span or vector is reported
  // here, once.
  template <class Store, class... Feeds>
  step_result_t<Root> operator()(Store& store, const Feeds&... feeds) const {
    constexpr bool own = detail::store_runs<Store, graph_step>();
    static_assert(own,
                  "ctg: this step does not run on this store: a store runs only the steps it was made for "
                  "(ctg::make_store(dev, step), or ctg::make_store(dev, train, eval...) for a training step and "
                  "the forward steps over its parameters; unfused(step) is another step)");
    constexpr bool fed = (requires { typename Feeds::leaf; } && ...);
    static_assert(!own || fed,
                  "ctg: a step takes each input's data as a feed: step(store, ctg::feed<X>(data, sizes...), ...), "
                  "not the data itself");
    if constexpr (own && fed) return detail::runner_of<graph_step>(store).run(feeds...);
    else return 0;
  }
};

// What value_and_grad and forward return when a check failed: the
// static_assert already said why. It runs on the store make_store gives for
// it (exec/invalid_store.hpp), so the user's next lines add no errors.
struct invalid_step {
  using nodes = tl::list<>;
  using outputs = tl::list<>;
  using wrt = tl::list<>;
  template <class... Args>
  float operator()(Args&&...) const {
    return 0.0f;
  }
};

// A step's key: a type that names the step without spelling it. A step's
// type spells its root and every leaf it differentiates with respect to
// (each leaf's name, letter by letter, in a mangled symbol), and the
// runtime (stores, group runners, the optimizer) instantiates hundreds of
// functions on the step: mangled with the step's type in them, their names
// ran to 15,000 characters and mangling took ~40% of the FP8 demo unit's
// compile time. So the runtime is instantiated on step_ref<A, B>, named by
// the 128-bit hash of the step's printed name and mapped back the way a
// vertex is (graph/node.hpp: node_ref). It has no members, so neither its
// mangled name nor its debug information mentions the step.
//   using K = step_key_t<Step>;  step_of<K> is Step (and step_of<Step> is Step too).
template <std::uint64_t A, std::uint64_t B>
struct step_ref {};

namespace detail {
template <class Step>
struct key_of_step {
  static constexpr name_hash128 key = hash_of_printed_name<Step>();
  static_assert(sizeof(define_node<Step, key.a, key.b>) > 0);  // (defines definition_of for the key)
  using type = step_ref<key.a, key.b>;
};
}  // namespace detail
template <class Step>
using step_key_t = typename detail::key_of_step<Step>::type;

namespace detail {
template <class T>
struct step_of_key {
  using type = T;
};
template <std::uint64_t A, std::uint64_t B>
struct step_of_key<step_ref<A, B>> {
  using type = typename decltype(definition_of(node_tag<A, B>{}))::type;
};
}  // namespace detail
template <class KeyOrStep>
using step_of = typename detail::step_of_key<KeyOrStep>::type;

namespace detail {
// Does the graph hold a node an op returned after reporting a mistake?
template <class... Ns>
consteval bool holds_failed(tl::list<Ns...>) {
  return ((Ns::kind == node_kind::failed) || ...);
}
}  // namespace detail

// What runs a step on some backend (exec/store.hpp's basic_store is the one
// implementation). nn::init_params, optim::adamw and the checkpoint files are
// written against it, so every backend gets them. Besides what the concept
// checks, a store has, for a stored leaf L (trainable, frozen or state):
//   store.param<L>()              its values, in the backend's memory
//   store.grad<L>()               its gradient after a step (L in the step's wrt)
//   store.upload(L{}, host)       host values -> the leaf
//   store.download(L{}, host)     the leaf -> host values
template <class S>
concept step_store = requires(S& s, const S& cs, std::uint64_t seed, std::uint64_t n) {
  typename S::step_type;
  typename S::backend_type;
  s.seed(seed);
  { cs.seed() } -> std::same_as<std::uint64_t>;
  { cs.steps_run() } -> std::same_as<std::uint64_t>;
  s.set_steps_run(n);
  { cs.kept_bytes() } -> std::same_as<std::size_t>;
};

// unfused(step): the same step with no fusion (one loop and one buffer per node).
template <class Root, class Wrt, bool Fuse, class ForwardRoot>
constexpr auto unfused(graph_step<Root, Wrt, Fuse, ForwardRoot>) {
  return graph_step<Root, Wrt, false, ForwardRoot>{};
}

// forward(e): a step that only evaluates e (any shape); read it with store.value().
template <expr E>
constexpr auto forward(E) {
  if constexpr (detail::holds_failed(topo_t<tl::list<E>>{})) return invalid_step{};  // already reported
  else return graph_step<node_t<E>, tl::list<>>{};
}

}  // namespace ctg
