#pragma once
// How a ctg::nn::stack runs on any backend (graph/stack.hpp has the node): a
// store for the block's graph (forward and backward parts, compiled once
// whatever the number of layers) driven once per layer, and the area where
// each layer keeps its values between the two parts (one layer's worth when
// the stack recomputes).
//
// Forward: layer i loads its slice of every stacked leaf, reads x_i and writes
// x_{i+1}; the stack's buffer keeps the output x_N in slot 0 and the inputs
// x_1 .. x_{N-1} in slots 1 .. N-1 for backward (in a step with no
// backward, two slots in turn: lower/schedule.hpp). Backward: for i = N-1 .. 0,
// the block's backward part at x_i (after its forward part again, when the
// stack recomputes) turns the gradient of x_{i+1} into that of x_i and gives
// layer i's parameter gradients. FP8 amaxes are recorded per layer (the
// block's quantizers write layer i's slots of one amax_record) and folded
// into each layer's states when the step commits; the states (each layer's
// slice of the stacked state leaves) update once the step is complete.
#include <array>
#include <cstddef>
#include <span>

#include <ctg/exec/buffers.hpp>
#include <ctg/exec/fp8_state.hpp>
#include <ctg/exec/replica_group.hpp>
#include <ctg/graph/stack.hpp>

namespace ctg {

template <class Backend, class Key>
class basic_store;

// The stack node R of the step with key ParentKey (graph/step.hpp).
template <class Backend, class ParentKey, std::size_t R>
class stack_runner {
 public:
  using S = tl::at_t<R, typename step_of<ParentKey>::nodes>;
  using block_step = typename S::backward_step;
  using block_key = step_key_t<block_step>;
  using block_store = basic_store<Backend, block_key>;
  static constexpr std::size_t node = R;
  // The parent's stack-grad node over this stack (none in a forward step).
  static constexpr std::size_t grad_node = schedule<ParentKey>::table.stack_grad_of(R);
  static constexpr bool has_backward = grad_node < schedule<ParentKey>::size;
  // Layers whose values are kept at once: all of them for a backward that
  // does not recompute; one (the layer running) when it recomputes, or when
  // no backward reads them (a forward step's stack kept every layer's).
  static constexpr std::size_t layers_kept = S::recompute || !has_backward ? 1 : S::layers;
  static constexpr std::size_t states = fp8_state<block_key>::states;

  // Each block scaling state's stacked leaves in the parent.
  struct state_pair {
    std::size_t scale = 0, history = 0;
  };
  static constexpr auto stacked_state = []<std::size_t... K>(std::index_sequence<K...>) {
    using parent_nodes = typename step_of<ParentKey>::nodes;
    using block_nodes = typename block_step::nodes;
    constexpr const auto& t = fp8_state<block_key>::table;
    return std::array<state_pair, states>{
        state_pair{tl::index_of<typename detail::stacked_leaf<S::layers, tl::at_t<t.state[K].scale, block_nodes>>::type,
                                  parent_nodes>::value,
                   tl::index_of<
                       typename detail::stacked_leaf<S::layers, tl::at_t<t.state[K].history, block_nodes>>::type,
                       parent_nodes>::value}...};
  }(std::make_index_sequence<states>{});

  // What all layers keep, as sized by the last plan; and that with the
  // block's other buffers (its scratch holds no kept values of its own).
  std::size_t kept_bytes() const { return kept_stride_ * layers_kept; }
  // (A block with stacks of its own is placed whole when sized, kept values
  // included, as their plans read its buffers: its scratch holds a layer's
  // kept values that runs keep in this stack's area. Counted, not hidden.)
  std::size_t scratch_bytes() const {
    constexpr bool block_placed_whole = std::tuple_size_v<typename block_store::stack_runner_tuple> > 0;
    return (own_area_ ? kept_bytes() : 0) + block_.scratch_bytes() -
           (block_placed_whole ? 0 : block_.mem_.kept_bytes());
  }

  // Size the area the layers keep their values in, and the block's buffers
  // and scratch, for this run's shapes (first before the parent's step
  // launches anything: basic_store::reserve_scratch).
  template <class Parent>
  void plan(Parent& p) {
    const auto& b = p.mem_.bound();
    const auto* in = reinterpret_cast<const typename S::dtype*>(b.buf[Parent::table.child(R, 0)]);
    if constexpr (requires { block_.ws_.follow(p.ws_); }) block_.ws_.follow(p.ws_);  // (the CPU's threads)
    block_.mem_.forward_part_only(!has_backward);
    kept_stride_ =
        align_up(block_.size_as_block(feed_like<typename S::carry>(b, in), feed_like<typename S::upstream>(b, in)));
    // (Inside a stacked block, the values live in the outer layer's area:
    // an area of its own was reserved and never used.)
    own_area_ = !p.in_stack_block_;
    if (own_area_) kept_.reserve(kept_stride_ * layers_kept + 64);
  }

  template <class Parent>
  void run_forward(Parent& p) {
    using T = typename S::dtype;
    const auto& b = p.mem_.bound();
    const std::size_t n = static_cast<std::size_t>(b.shape[R].numel());
    T* layer_values = b.template as<T>(R);
    const T* in = b.template as<const T>(Parent::table.child(R, 0));
    plan(p);
    std::byte* kept = kept_area(p);
    for (std::size_t i = 0; i < S::layers; ++i) {
      enter_layer(p, i, false);
      // (The forward part never reads the upstream gradient; it is fed x_i for its shape.)
      block_.run_forward_part(kept + (layers_kept == 1 ? 0 : i * kept_stride_),
                              feed_like<typename S::carry>(b, in), feed_like<typename S::upstream>(b, in));
      // (With a backward, layer i + 1's input in slot i + 1, the output in
      // slot 0; without one, two slots in turn, the last layer's into 0.)
      const std::size_t slot = has_backward ? (i + 1 == S::layers ? 0 : i + 1) : (S::layers - 1 - i) % 2;
      T* next = layer_values + slot * n;
      Backend::copy(p.ws_, reinterpret_cast<std::byte*>(next), block_.template value_bytes<block_out>(), n * sizeof(T));
      in = next;
    }
  }

  // The stack's backward: the parent's stack-grad node over this stack
  // (children: the stack, the upstream gradient).
  template <class Parent>
  void run_backward(Parent& p) {
    using T = typename S::dtype;
    constexpr std::size_t G = grad_node;
    constexpr std::size_t ig = Parent::table.child(G, 1), ix = Parent::table.child(R, 0);
    const auto& b = p.mem_.bound();
    const std::size_t n = static_cast<std::size_t>(b.shape[G].numel());
    const T* layer_values = b.template as<const T>(R);
    T* gx = reinterpret_cast<T*>(b.buf[G] + Parent::table.node[G].extra_bytes);
    const T* g = b.template as<const T>(ig);
    std::byte* kept = kept_area(p);
    for (std::size_t i = S::layers; i-- > 0;) {
      const T* in = i == 0 ? b.template as<const T>(ix) : layer_values + i * n;
      enter_layer(p, i, true);
      const auto carry = feed_like<typename S::carry>(b, in);
      const auto up = feed_like<typename S::upstream>(b, g);
      if constexpr (S::recompute) block_.run_recomputing(kept, carry, up);
      else block_.run_backward_part(kept + i * kept_stride_, carry, up);
      for (const param_grad& pg : param_grads)
        Backend::copy(p.ws_, b.buf[G] + pg.offset + i * pg.bytes, block_.mem_.bound().buf[pg.output], pg.bytes);
      Backend::copy(p.ws_, reinterpret_cast<std::byte*>(gx),
                    block_.template output_bytes<block_step::template grad_output<typename S::carry>>(), n * sizeof(T));
      g = gx;
    }
  }

  // The layers' FP8 amaxes (the parent folds them when its run commits; a
  // replica group makes the states' the max over its replicas), made on the
  // parent's workspace when the parent is made.
  void make_amax_record(typename Backend::workspace& ws) { amaxes_.make(ws, S::layers); }
  amax_record<Backend, block_key>& amaxes() { return amaxes_; }
  // When the parent's step is complete: each state updated once on every layer's slice.
  template <class Parent>
  void update_state(Parent& p) {
    for (std::size_t s = 0; s < states; ++s)
      amaxes_.update(p.ws_, s, reinterpret_cast<float*>(p.mem_.param_bytes(stacked_state[s].history)),
                     reinterpret_cast<float*>(p.mem_.param_bytes(stacked_state[s].scale)));
  }

 private:
  static constexpr std::size_t block_out = tl::index_of<typename S::block_out, typename block_step::nodes>::value;

  // Each block leaf, by node index in the block's graph and in the parent's
  // (its stacked copy), with the bytes of one layer's slice.
  struct leaf_slice {
    std::size_t block = 0, stacked = 0, bytes = 0;
  };
  static constexpr auto leaf_slices = []<class... Ls>(tl::list<Ls...>) {
    return std::array<leaf_slice, sizeof...(Ls)>{
        leaf_slice{tl::index_of<Ls, typename block_step::nodes>::value,
                   tl::index_of<typename detail::stacked_leaf<S::layers, Ls>::type, typename step_of<ParentKey>::nodes>::value,
                   Ls::dims::static_numel * sizeof(typename Ls::dtype)}...};
  }(typename S::leaves{});

  // Each trainable block leaf's gradient: the block output it is in, and
  // where its layers' slices go in the stack-grad buffer.
  struct param_grad {
    std::size_t output = 0, offset = 0, bytes = 0;
  };
  static constexpr auto param_grads = []<class... Ps>(tl::list<Ps...>) {
    return std::array<param_grad, sizeof...(Ps)>{param_grad{
        tl::index_of<tl::at_t<block_step::template grad_output<Ps>, typename block_step::outputs>,
                       typename block_step::nodes>::value,
        S::grad_offset(tl::index_of<Ps, typename S::leaves>::value),
        Ps::dims::static_numel * sizeof(typename Ps::dtype)}...};
  }(typename S::trainable{});

  // The block's leaves at layer i's slice of every stacked leaf (read in
  // place: the block's parts never write a leaf), or at the slices a replica
  // group gathered for it (dist::fsdp, which may also give the values of the
  // block's quantize nodes), and the layer's random key.
  template <class Parent>
  void enter_layer(Parent& p, std::size_t layer, bool backward) {
    replica_group* group = p.group_ && p.group_->holds_stacked_params() ? static_cast<replica_group*>(p.group_) : nullptr;
    if (group) group->gather_layer(R, layer, backward);
    block_.layer_group_ = group;
    block_.layer_stack_ = R;
    block_.profile_ = p.profile_;  // (the block's groups add to its parent's profile, under R)
    if (p.profile_) block_.profile_block_ = p.profile_block_.in(R);
    for (const leaf_slice& l : leaf_slices) {
      const std::byte* gathered = group ? group->layer_slice(l.stacked) : nullptr;
      block_.mem_.share_leaf(l.block, gathered ? const_cast<std::byte*>(gathered)
                                               : p.mem_.bound().buf[l.stacked] + layer * l.bytes);
    }
    // (Layer `layer` of this stack under the parent's layer: a stack inside
    // a stacked block keys outer layer o's layer i as o * layers + i. It
    // keyed it i alone, so every outer layer drew its inner layers' masks.)
    block_.key_ = {p.key_.seed, p.key_.step, p.key_.layer * static_cast<std::uint32_t>(S::layers) + static_cast<std::uint32_t>(layer)};
    block_.pending_amax_ = amaxes_.pending(layer);
  }

  // Where the layers keep their values: in the parent's kept area when it
  // has one (this stack is inside a stacked block: the area is the outer
  // layer's), else in this runner's own.
  template <class Parent>
  std::byte* kept_area(Parent& p) {
    std::byte* given = p.stack_kept_area(*this);
    return given ? given : kept_.data();
  }

  // A feed of `data` to the block's leaf L, shaped like the parent's stack node.
  template <class L, std::size_t N, class T>
  static feed_t<L> feed_like(const bindings<N>& b, const T* data) {
    feed_t<L> f{std::span<const T>(data, static_cast<std::size_t>(b.shape[R].numel())), {}};
    for (std::size_t d = 0, k = 0; d < L::dims::rank; ++d)
      if (L::dims::dims[d] == dyn) f.dyn_dims[k++] = b.shape[R].d[d];
    return f;
  }

  block_store block_{typename block_store::block_of_stack{}};
  typename Backend::arena kept_;
  std::size_t kept_stride_ = 0;
  bool own_area_ = true;  // (false in a stacked block: the outer layer's area holds the values)
  amax_record<Backend, block_key> amaxes_;
};

}  // namespace ctg
