#pragma once
// Where a step's values live, for any backend: the stored leaves (parameters,
// frozen leaves, FP8 state) and their gradients at fixed offsets; fed inputs
// bound in place; every other buffer the program calls for (lower/program.hpp)
// placed by liveness in scratch, the values kept for backward in a pool of
// their own (which a caller may provide: a stack's layers keep theirs apart);
// views pointing into their base's buffer; a checkpoint region's recomputed
// values bound when backward enters it. The first output is computed into an
// unpublished buffer and published only when the step commits, so a step that
// throws leaves the previous result readable.
//
// Memory comes from the backend (Backend::arena); this class only decides
// offsets and fills the bindings (exec/bindings.hpp) the group runners read.
#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <ctg/exec/bindings.hpp>
#include <ctg/exec/buffer_placement.hpp>
#include <ctg/exec/feed.hpp>
#include <ctg/exec/runtime_shapes.hpp>
#include <ctg/lower/program.hpp>

namespace ctg {

inline constexpr std::size_t align_up(std::size_t n) { return (n + 63) / 64 * 64; }

// A quantized buffer holds the payload, then (64-byte aligned) its side
// data, which fp8_matmul and dequantize read. scale_inv is 16-byte aligned:
// cuBLASLt reads it through an FP8 scale pointer, and refuses one that is
// only 4-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED, seen on an H100).
struct fp8_side_data {
  float amax;
  float scale;
  float unused_[2];
  float scale_inv;
};
inline constexpr std::size_t fp8_side_bytes = 64;
static_assert(sizeof(fp8_side_data) <= fp8_side_bytes && offsetof(fp8_side_data, scale_inv) % 16 == 0);
inline constexpr std::size_t fp8_side_offset(std::size_t payload_elements) { return align_up(payload_elements); }
inline fp8_side_data* fp8_side(const bindings_view& b, std::size_t q) {
  return reinterpret_cast<fp8_side_data*>(b.buf[q] + fp8_side_offset(static_cast<std::size_t>(b.shape[q].numel())));
}

namespace detail {

// The tag of a step's buffers, or store, that holds no leaves of its own
// and runs on another store's (step_buffers' constructor below).
struct on_shared_leaves {};

// Is L a leaf the store keeps (trainable, frozen or state), rather than a fed one?
template <class L>
consteval bool stored_leaf() {
  if constexpr (is_leaf_v<L>) return !L::fed;
  else return false;
}

// The feeds of one step, by type: every input the step reads fed exactly
// once, and nothing else. Each mistake is reported once, in a function
// templated on the input, so the compiler's note names it.
template <class L, class... Fed>
consteval bool check_fed_once() {
  constexpr std::size_t count = (std::size_t(0) + ... + std::is_same_v<Fed, L>);
  static_assert(count != 0, "ctg: missing feed for an input this step reads (L in the note above): "
                            "pass ctg::feed<L>(data, sizes...)");
  static_assert(count < 2, "ctg: an input is fed twice (L in the note above)");
  return count == 1;
}
template <class Inputs, class F>
consteval bool check_feed_read() {
  static_assert(tl::contains<F, Inputs>::value, "ctg: a feed for an input this step does not read (F in the note above)");
  return tl::contains<F, Inputs>::value;
}
template <class Inputs, class... Fed>
consteval bool check_feeds() {
  constexpr bool each_once = []<class... Ls>(tl::list<Ls...>) {
    return (check_fed_once<Ls, Fed...>() & ... & true);
  }(Inputs{});
  return (check_feed_read<Inputs, Fed>() & ... & each_once);
}
// The inputs a step reads (its fed leaves), in order.
template <class... Ns>
auto fed_leaves(tl::list<Ns...>)
    -> tl::concat_t<std::conditional_t<stored_leaf<Ns>() || !is_leaf_v<Ns>, tl::list<>, tl::list<Ns>>...>;

// The bytes of a node's buffer for `numel` elements of its value: a stack
// keeps every layer's input, a stack's backward the stacked leaves' gradients
// before the input's, a quantized tensor its side data. One spare byte keeps
// zero-sized buffers distinct.
// Sizes past 2^62 bytes are an error (they wrapped: a small buffer for a
// huge tensor).
inline std::size_t buffer_bytes(const node_desc& d, std::size_t numel) {
  constexpr std::size_t limit = std::size_t{1} << 62;
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(numel, d.elem_bytes * d.layers, &bytes) || bytes > limit - d.extra_bytes - 1024)
    throw error("ctg: size overflows: a buffer of " + std::to_string(numel) + " elements of " +
                std::to_string(d.elem_bytes) + " bytes" + (d.layers > 1 ? " (" + std::to_string(d.layers) + " layers)" : "") +
                " is past 2^62 bytes");
  bytes += d.extra_bytes;
  if (d.kind == node_kind::quantize) bytes = align_up(bytes) + fp8_side_bytes;
  return align_up(bytes + 1);
}

}  // namespace detail

// Key: the step's key (graph/step.hpp). Everything here but the feeds runs
// over the step's tables (lower/), not its node types: one loop per job,
// not one instantiation per node.
template <class Backend, class Key>
class step_buffers {
 public:
  using Step = step_of<Key>;
  using nodes = typename Step::nodes;
  static constexpr std::size_t N = nodes::size;
  static constexpr const auto& table = schedule<Key>::table;
  static constexpr const auto& prog = program<Key>::table;
  static constexpr std::size_t first_output = tl::index_of<tl::at_t<0, typename Step::outputs>, nodes>::value;
  using arena = typename Backend::arena;
  using inputs = decltype(detail::fed_leaves(nodes{}));  // what a run is fed

  // The trainable and frozen leaves of a stack (its stacked parameters, not
  // its FP8 state): in an arena of their own, which the store frees while a
  // data-parallel group holds them in shards (dist::fsdp).
  static constexpr std::array<bool, N + 1> stacked_param = [] {
    std::array<bool, N + 1> s{};
    for (std::size_t i = 0; i < N; ++i)
      if (table.node[i].kind == node_kind::stack)
        for (std::size_t k = 1; k < table.node[i].nchild; ++k) {
          const detail::node_desc& c = table.node[table.child(i, k)];
          s[table.child(i, k)] = c.stored && (c.grad || c.frozen);
        }
    return s;
  }();

  // Stored leaves at fixed offsets in one arena (stacked parameters in
  // another), their gradients (for the wrt leaves) in a third.
  struct leaf_layout {
    std::size_t param_offset[N]{};  // in its arena
    std::size_t param_bytes = 0, stacked_bytes = 0;
    std::size_t grad_offset[N]{};  // by node index of the leaf
    std::size_t grad_bytes = 0;
  };
  static constexpr leaf_layout layout = [] {
    leaf_layout l;
    for (std::size_t i = 0; i < N; ++i) {
      const detail::node_desc& d = table.node[i];
      if (!d.stored) continue;
      const std::size_t bytes = align_up(d.elem_bytes * static_cast<std::size_t>(d.dims.numel()));
      std::size_t& arena_bytes = stacked_param[i] ? l.stacked_bytes : l.param_bytes;
      l.param_offset[i] = arena_bytes;
      arena_bytes += bytes;
      if (d.grad) {
        l.grad_offset[i] = l.grad_bytes;
        l.grad_bytes += bytes;
      }
    }
    return l;
  }();

  // A step over another store's leaves holds none of its own: share_leaf
  // binds each one before a run. Such a step is another step's runner in a
  // store over several steps (exec/shared_store.hpp: a forward step, no
  // gradients) or a stack's block (exec/stack_runner.hpp: bound to a layer's
  // slices; its gradients go to the stack's buffer). (Their own arenas,
  // zero-filled and never read, held a copy of the model per forward step,
  // and a layer's parameters and gradients per block.)
  explicit step_buffers(detail::on_shared_leaves) : shares_leaves_(true) {
    params_.reserve(64);
    grads_.reserve(64);
  }
  step_buffers() {
    params_.reserve(layout.param_bytes ? layout.param_bytes : 64);
    grads_.reserve(layout.grad_bytes ? layout.grad_bytes : 64);
    for (std::size_t i = 0; i < N; ++i) {
      if (stacked_param[i]) continue;
      leaf_[i] = params_.data() + layout.param_offset[i];
      if (table.node[i].stored) b_.buf[i] = leaf_[i];
    }
    hold_stacked_params();
  }

  // Stored leaf i: in this step's own arena, or where share_leaf put it (a
  // step over another store's leaves: exec/shared_store.hpp); null for a
  // stacked parameter while the store holds none.
  std::byte* param_bytes(std::size_t i) { return leaf_[i]; }
  // The stacked parameters' arena: freed, or made again (zero-filled).
  bool holds_stacked_params() const {
    if (!shares_leaves_) return stacked_.has_value();
    for (std::size_t i = 0; i < N; ++i)
      if (stacked_param[i] && !leaf_[i]) return false;
    return true;
  }
  void release_stacked_params() {
    stacked_.reset();
    for (std::size_t i = 0; i < N; ++i)
      if (stacked_param[i]) leaf_[i] = b_.buf[i] = nullptr;
  }
  void hold_stacked_params() {
    if (stacked_ || shares_leaves_) return;
    stacked_.emplace();
    stacked_->reserve(layout.stacked_bytes ? layout.stacked_bytes : 64);
    for (std::size_t i = 0; i < N; ++i)
      if (stacked_param[i]) leaf_[i] = b_.buf[i] = stacked_->data() + layout.param_offset[i];
  }
  // Bytes of stored leaves this store holds (parameters, frozen leaves, FP8 state).
  std::size_t stored_bytes() const {
    return shares_leaves_ ? 0 : layout.param_bytes + (stacked_ ? layout.stacked_bytes : 0);
  }
  void share_leaf(std::size_t i, std::byte* at) { leaf_[i] = b_.buf[i] = at; }
  // Only the forward part runs (a stack's block in a step with no backward,
  // exec/stack_runner.hpp): the buffers the backward part writes take no
  // memory (they held a layer's gradients, weights' included, for nothing).
  void forward_part_only(bool only) { forward_part_only_ = only; }
  std::byte* grad_bytes(std::size_t i) { return grads_.data() + layout.grad_offset[i]; }  // (not on shared leaves)
  const bindings<N>& bound() const { return b_; }
  bindings<N>& bound() { return b_; }

  // Bind the feeds, resolve every run-time shape (checking the fed ones),
  // and place every buffer for them. `kept_area`: where the kept values go
  // (null: in scratch).
  template <class... Feeds>
  void prepare(typename Backend::workspace& ws, std::byte* kept_area, const Feeds&... feeds) {
    kept_area_ = kept_area;
    (bind_input(ws, feeds), ...);
    detail::resolve_shapes(table.view(), b_.shape.data());
    place(true);
  }
  // The pools' sizes for these feeds, for a caller that keeps the kept pool
  // itself (a stack's block: its layers' kept values live in the stack's
  // area): the scratch is grown for the rest only, and no buffer is bound.
  // (Planned as a store, the block's scratch held a layer's kept values
  // that no run used.)
  template <class... Feeds>
  void size_pools(typename Backend::workspace& ws, const Feeds&... feeds) {
    kept_area_ = nullptr;
    (bind_input(ws, feeds), ...);
    detail::resolve_shapes(table.view(), b_.shape.data());
    place(false);
  }

  // Backward reads the recomputed values of a region from here on.
  void enter_recompute(std::size_t region) {
    for (std::size_t j = 0; j < N; ++j)
      if (prog.region[j] == region && prog.recomputed[j].present) b_.buf[j] = buffer_at(j, true);
    bind_views();
  }

  // The first output of the run being computed becomes the published one.
  // A first output that is a leaf (no buffer of its own) is copied in first.
  void publish(typename Backend::workspace& ws, std::size_t count) {
    if constexpr (!prog.owns[first_output]) {
      const std::size_t bytes = count * table.node[first_output].elem_bytes;
      out_[1 - published_].reserve(align_up(bytes + 1));
      Backend::copy(ws, out_[1 - published_].data(), b_.buf[first_output], bytes);
    }
    published_ = 1 - published_;
    value_count_ = count;
  }
  const std::byte* published() const { return out_[published_].data(); }
  std::size_t published_count() const { return value_count_; }

  std::size_t kept_bytes() const { return kept_bytes_; }
  std::byte* kept_area() const { return kept_area_; }  // (null: the kept pool is in scratch)
  std::size_t rest_bytes() const { return rest_bytes_; }
  std::size_t scratch_bytes() const { return kept_bytes_ + rest_bytes_; }

 private:
  // ------------------------------------------------------------ feeds ----
  // Which inputs are fed is known from the feeds' types: the store's doors
  // check it at compile time (detail::check_feeds, over `inputs`). Only sizes
  // and data are checked here, at run time.
  template <class L>
  void bind_input(typename Backend::workspace& ws, const feed_t<L>& f) {
    constexpr std::size_t i = tl::index_of<L, nodes>::value;
    b_.shape[i] = detail::fed_shape(L::name.c_str(), table.node[i].dims, f.dyn_dims, f.data.data() != nullptr,
                                    f.data.size());
    b_.buf[i] = Backend::bind_input(ws, f.data.data(), f.data.size() * sizeof(typename L::dtype),
                                    staging_[tl::index_of<L, inputs>::value]);
  }

  // ----------------------------------------------------------- memory ----
  // The lives to place, in the order they begin: kept ones in their own pool.
  // The forward part alone (a forward step's stack block) places its values'
  // lives in one pool, kept ones first where two begin together: what it
  // would keep for backward lives to the part's end only.
  struct life_ref {
    std::size_t node = 0;
    bool recomputed = false;
  };
  struct life_order {
    life_ref kept[N + 1]{};
    std::size_t nkept = 0;
    life_ref rest[2 * N + 1]{};
    std::size_t nrest = 0;
    life_ref forward[N + 1]{};
    std::size_t nforward = 0;
  };
  static constexpr life_order lives = [] {
    life_order o;
    for (std::size_t q = 0; q <= prog.len; ++q) {
      for (std::size_t j = 0; j < N; ++j) {
        if (j == first_output) continue;
        if (prog.value[j].present && prog.value[j].begin == q) {
          if (prog.kept[j]) o.kept[o.nkept++] = {j, false};
          else o.rest[o.nrest++] = {j, false};
        }
        if (prog.recomputed[j].present && prog.recomputed[j].begin == q) o.rest[o.nrest++] = {j, true};
      }
      for (const bool kept : {true, false})
        for (std::size_t j = 0; j < N; ++j)
          if (j != first_output && prog.value[j].present && prog.value[j].begin == q && prog.kept[j] == kept)
            o.forward[o.nforward++] = {j, false};
    }
    return o;
  }();

  void place(bool bind) {
    std::array<std::size_t, N> bytes{};
    for (std::size_t i = 0; i < N; ++i) {
      if (!prog.owns[i]) continue;
      if (forward_part_only_ && prog.value[i].begin >= prog.backward_begin) continue;  // (no byte: never written)
      const dim_t n = detail::checked_numel(b_.shape[i], "an intermediate");
      bytes[i] = detail::buffer_bytes(table.node[i], static_cast<std::size_t>(n));
    }
    if (bytes != bytes_) place_lives(bytes);
    if constexpr (prog.owns[first_output]) out_[1 - published_].reserve(bytes[first_output]);
    scratch_.reserve(rest_bytes_ + (kept_area_ || !bind ? 0 : kept_bytes_));
    if (!bind) return;
    for (std::size_t j = 0; j < N; ++j)
      if (prog.owns[j]) b_.buf[j] = j == first_output ? out_[1 - published_].data() : buffer_at(j, false);
    bind_views();
  }

  // The offsets of buffers of these sizes, taken together with the sizes
  // once all are placed: a placement that throws (std::bad_alloc, a size
  // past 2^62) leaves the last one whole, and the next run places again
  // (recorded first, the sizes made that run skip placing: it ran on the
  // offsets of another run's sizes).
  void place_lives(const std::array<std::size_t, N>& bytes) {
    std::vector<detail::buffer_life> l(lives.nkept + lives.nrest + 1);
    std::vector<std::size_t> at(l.size());
    auto offset = offset_;
    // (Lives placed up to position `last` at the latest.)
    auto place = [&](const life_ref* refs, std::size_t count, std::size_t last) {
      for (std::size_t i = 0; i < count; ++i) {
        const auto& life = refs[i].recomputed ? prog.recomputed[refs[i].node] : prog.value[refs[i].node];
        l[i] = {life.begin, std::min(life.end, last), bytes[refs[i].node]};
      }
      const std::size_t size = detail::place_lives(l.data(), count, at.data());
      for (std::size_t i = 0; i < count; ++i) offset[refs[i].node][refs[i].recomputed] = at[i];
      return size;
    };
    std::size_t kept = 0, rest = 0;
    if (!forward_part_only_) {
      kept = place(lives.kept, lives.nkept, prog.len);
      rest = place(lives.rest, lives.nrest, prog.len);
    } else {
      rest = place(lives.forward, lives.nforward, prog.backward_begin - 1);
    }
    offset_ = offset;
    kept_bytes_ = kept;
    rest_bytes_ = rest;
    bytes_ = bytes;
  }

  std::byte* buffer_at(std::size_t j, bool recomputed) {
    if (!recomputed && prog.kept[j] && !forward_part_only_)
      return (kept_area_ ? kept_area_ : scratch_.data()) + offset_[j][0];
    return scratch_.data() + (kept_area_ ? 0 : kept_bytes_) + offset_[j][recomputed];
  }
  void bind_views() {
    for (std::size_t j = 0; j < N; ++j) {
      const detail::node_desc& d = table.node[j];
      if (d.kind != node_kind::view) continue;
      // (value k of a base holding several of one shape, attention's gradients: k values of it further)
      const std::size_t value_bytes = static_cast<std::size_t>(b_.shape[j].numel()) * d.elem_bytes;
      b_.buf[j] = b_.buf[table.child(j, 0)] + d.byte_offset + d.value_index * value_bytes;
    }
  }

  arena params_, grads_, scratch_;
  std::optional<arena> stacked_;                        // the stacked parameters (stacked_param)
  std::array<arena, inputs::size + 1> staging_;         // each fed input's copy, where the device needs one
  std::array<std::byte*, N + 1> leaf_{};                // each stored leaf's values (by node index)
  arena out_[2];                                        // the first output: published and being computed
  std::size_t published_ = 0, value_count_ = 0;
  std::array<std::size_t, N> bytes_{};                  // each buffer's size in the current placement
  std::array<std::array<std::size_t, 2>, N> offset_{};  // each life's offset in its pool: [value, recomputed]
  std::size_t kept_bytes_ = 0, rest_bytes_ = 0;         // the two pools
  std::byte* kept_area_ = nullptr;                      // the kept pool, when the caller provides it
  bindings<N> b_;
  bool shares_leaves_ = false;  // (detail::on_shared_leaves)
  bool forward_part_only_ = false;
};

}  // namespace ctg
