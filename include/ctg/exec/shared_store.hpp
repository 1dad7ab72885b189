#pragma once
// One store for a training step and the forward steps that read the same
// parameters (evaluation, sampling), for any backend:
//
//   auto train  = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
//   auto sample = ctg::forward(M::evaluation::logits(Ids{}, Pos{}));    // no dropout
//   auto store  = ctg::make_store(dev, train, sample);
//   train(store, feeds...);  opt.step(store);
//   sample(store, feeds...);  auto logits = store.value(sample);
//
// The store is the training step's (basic_store: its leaves, gradients, FP8
// state, seed and step count, what an optimizer and the checkpoint files
// see), plus one runner per other step whose stored leaves are bound to the
// training step's: no copy, so a step sees every update the moment it is
// made. The leaves are matched by name and type at compile time: every leaf
// another step stores must be one the training step stores, of the same
// type. The other steps are forward steps without dropout, and running them
// changes no state: no step count, no FP8 scaling update (their quantizers
// read the training step's scales), no gradient.
#include <array>
#include <tuple>
#include <type_traits>

#include <ctg/exec/invalid_store.hpp>
#include <ctg/exec/store.hpp>

namespace ctg {

namespace detail {
// The checks on one step that shares a training step's leaves (Main: the
// training step's nodes). Each mistake is reported once, in a function
// templated on what the note should name; all return true, so a
// static_assert over them adds no error of its own.
template <class Other>
consteval bool check_forward_only() {
  static_assert(Other::wrt::size == 0,
                "ctg: a store's other steps are forward steps (ctg::forward): the first step given to make_store "
                "is the one that trains; another training step needs a store of its own");
  return true;
}
// (Its stacks' blocks too: a transformer's dropouts are in its layers. Only
// the top-level nodes were looked at, and a transformer's own logits, not its
// evaluation's, compiled: masks that changed with the training step count.)
template <class Other>
consteval bool check_no_dropout() {
  constexpr bool none = dropouts_of<typename Other::nodes>::type::size == 0;
  static_assert(none,
                "ctg: a step sharing a training store runs without dropout (it evaluates the trained model): build "
                "it from the model without dropout (nn::transformer<Cfg, P>::evaluation)");
  return true;
}
template <class L>
consteval void report_leaf_not_in_training_step() {
  static_assert(sizeof(L) == 0,
                "ctg: a step sharing a training store reads a leaf the training step does not have (L in the note "
                "above): the store holds the training step's leaves only");
}
// The names of the leaves of the step keyed Key, in order.
template <class Key>
inline constexpr auto leaf_names_of = []<class... Ms>(tl::list<Ms...>) {
  return std::array<const char*, sizeof...(Ms)>{Ms::name.c_str()...};
}(leaves_t<typename step_of<Key>::nodes>{});
// The position of the first of names that is name (names' size if none is).
template <std::size_t N>
consteval std::size_t position_of_name(const std::array<const char*, N>& names, const char* name) {
  std::size_t i = 0;
  while (i < N && !same_chars(names[i], name)) ++i;
  return i;
}
// Leaf L of another step against the leaves of the training step (keyed
// MainKey; per leaf, nothing is named by the training step's leaf list).
template <class MainKey, class L>
consteval bool check_shared_leaf() {
  using main_leaves = leaves_t<typename step_of<MainKey>::nodes>;
  if constexpr (stored_leaf<L>() && !tl::contains<L, main_leaves>::value) {
    constexpr std::size_t at = position_of_name(leaf_names_of<MainKey>, L::name.c_str());
    if constexpr (at == main_leaves::size) report_leaf_not_in_training_step<L>();
    else report_name_clash<L, tl::at_t<at, main_leaves>>();  // the same name, another type: the clash names both
  }
  return true;
}
template <class MainKey, class Other>
consteval bool check_shares_leaves() {
  if constexpr (!check_forward_only<Other>() || !check_no_dropout<Other>()) return true;
  else
    return []<class... Ls>(tl::list<Ls...>) {
      return (check_shared_leaf<MainKey, Ls>() && ...);
    }(leaves_t<typename Other::nodes>{});
}
// make_store's other steps, each given once: two forward steps of one
// expression are one step (one type), whose runner and value they would
// share. (std::get of the runner failed in libstdc++ at the first use.)
template <class K, class... Keys>
inline constexpr std::size_t times_given = (std::size_t(0) + ... + std::size_t(std::is_same_v<K, Keys>));
template <class... OtherKeys>
consteval bool check_each_step_once() {
  constexpr bool once = ((times_given<OtherKeys, OtherKeys...> == 1) && ...);
  static_assert(once,
                "ctg: make_store was given one forward step twice (two forward steps of the same expression are one "
                "step): give it once, and run it for each batch");
  return once;
}
}  // namespace detail

// MainKey, OtherKeys: the steps' keys (graph/step.hpp); the first trains.
template <class Backend, class MainKey, class... OtherKeys>
class shared_store : public basic_store<Backend, MainKey> {
  using main_store = basic_store<Backend, MainKey>;

 public:
  // The steps this store runs (graph_step's call operator looks here).
  using steps = tl::list<step_of<MainKey>, step_of<OtherKeys>...>;
  static_assert((detail::check_shares_leaves<MainKey, step_of<OtherKeys>>() && ...));

  shared_store() : others_(leaves_shared_by<OtherKeys>{}...) { share_with_others(); }
  // On a device whose workspace is made from it (a GPU's).
  template <class Device>
    requires std::constructible_from<typename Backend::workspace, Device&>
  explicit shared_store(Device& dev) : main_store(dev), others_(leaves_shared_by<OtherKeys>{}...) {
    share_with_others();
  }

  // The store that runs Step: this one, or the runner of another step
  // (with the training step's seed and step count, and its leaves bound
  // again: a data-parallel group under dist::fsdp frees and remakes the
  // training step's copy of a stack's parameters; while they are held in
  // shards only, running another step that reads them is a ctg::error).
  template <class Step>
  auto& runner() {
    if constexpr (std::is_same_v<Step, step_of<MainKey>>) {
      return static_cast<main_store&>(*this);
    } else {
      auto& r = other<Step>();
      r.key_ = this->key_;
      if constexpr (requires { r.ws_.follow(this->ws_); }) r.ws_.follow(this->ws_);  // (the CPU's threads)
      bind(r);
      return r;
    }
  }

  // The value of Step's first output after its last run.
  using main_store::value;
  template <class Step>
    requires tl::contains<Step, steps>::value
  auto value(const Step&) {
    return store_of<Step>().value();
  }
  using main_store::download_value;
  using main_store::value_count;
  template <class Step, class T>
    requires tl::contains<Step, steps>::value
  void download_value(const Step&, std::span<T> host) {
    store_of<Step>().download_value(host);
  }
  template <class Step>
    requires tl::contains<Step, steps>::value
  std::size_t value_count(const Step&) {
    return store_of<Step>().value_count();
  }

 private:
  template <class Step>
  auto& other() {
    return std::get<basic_store<Backend, step_key_t<Step>>>(others_);
  }
  // The store that ran Step last (this one, or another step's runner).
  template <class Step>
  auto& store_of() {
    if constexpr (std::is_same_v<Step, step_of<MainKey>>) return static_cast<main_store&>(*this);
    else return other<Step>();
  }

  // The other steps read the training step's leaves and run under its lock.
  void share_with_others() {
    std::apply([&](auto&... other) { ((bind(other), this->run_lock_.share_with(other.run_lock_)), ...); }, others_);
  }
  // Every leaf the other step stores is the training step's (checked above;
  // after a reported mistake, those that are).
  template <class OtherKey>
  void bind(basic_store<Backend, OtherKey>& other) {
    [&]<class... Ns>(tl::list<Ns...>) {
      (bind_leaf<Ns>(other), ...);
    }(typename step_of<OtherKey>::nodes{});
  }
  // One node of the other step: a stored leaf reads the training step's bytes.
  template <class L, class OtherKey>
  void bind_leaf(basic_store<Backend, OtherKey>& other) {
    if constexpr (detail::stored_leaf<L>() && tl::contains<L, typename main_store::nodes>::value)
      other.mem_.share_leaf(tl::index_of<L, typename step_of<OtherKey>::nodes>::value, this->template leaf_bytes<L>());
  }

  template <class OtherKey>
  using leaves_shared_by = detail::on_shared_leaves;  // (one per other step)
  std::tuple<basic_store<Backend, OtherKeys>...> others_;
};

// make_store(dev, train, eval...): one store for a training step and the
// forward steps that read its parameters (see the top of this file).
template <class Device, class Main, class Other, class... More>
auto make_store(const Device& dev, Main main, Other, More...) {
  if constexpr (std::is_same_v<Main, invalid_step> || std::is_same_v<Other, invalid_step> ||
                (std::is_same_v<More, invalid_step> || ...)) {
    return invalid_store{};  // (already reported)
  } else if constexpr (!detail::check_each_step_once<step_key_t<Other>, step_key_t<More>...>()) {
    return invalid_store{};
  } else {
    using backend = typename decltype(make_store(dev, main))::backend_type;
    using S = shared_store<backend, step_key_t<Main>, step_key_t<Other>, step_key_t<More>...>;
    if constexpr (std::is_constructible_v<S, const Device&>) {
      backend::template check_device<S>(dev);  // (a GPU's: what the device cannot run)
      return S(dev);                             // (its workspace is made from the device)
    } else {
      S s;
      if constexpr (requires { s.workspace().use(dev); }) s.workspace().use(dev);  // (the CPU's threads)
      return s;
    }
  }
}

}  // namespace ctg
