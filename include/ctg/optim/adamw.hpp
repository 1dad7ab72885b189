#pragma once
// AdamW with f32 master weights, exactly as torch.optim.AdamW (amsgrad=False,
// maximize=False, one param group) updates, plus optional global-norm
// gradient clipping with torch.nn.utils.clip_grad_norm_'s semantics.
//
//   auto store = ctg::make_store(dev, step);
//   init(store.param<W1>()), ...;                      // initialise parameters FIRST:
//   ctg::optim::adamw opt(store, {.lr = 3e-4f});       // masters are taken from them here
//   for (...) {
//     step(store, ctg::feed<X>(x, batch));
//     float grad_norm = opt.step(store, schedule(opt.steps()));
//   }
//
// State, all f32, for every trainable leaf of the step (every leaf in
// Step::wrt): exp_avg (m), exp_avg_sq (v), and, for leaves whose dtype is not
// f32 (bf16, f16, fp8, f64), an f32 master copy that the update is applied to;
// the stored parameter is then the master rounded to its dtype (round to
// nearest even; fp8 saturates). An f32 leaf is its own master and is updated
// in place. Frozen leaves and inputs get no state and are never written; so
// are params that are not in this step's wrt<...>.
//
// The master owns a narrow parameter's value; the stored parameter is what
// the optimizer last made of it. A write to it afterwards (through
// store.param<L>(), store.upload, a params-only io::load, safetensors) would
// be undone by the next update, so the next step throws instead, naming the
// leaf: take the written values as masters with sync_masters(store), or load
// the optimizer's state with them (io::load(path, store, opt)).
//
// Gradients come in sets (store.accumulate(k): the mean of k micro-batches;
// k = 1 by default): a step takes a complete set and consumes it, so each
// set is applied once; an incomplete or consumed set throws ctg::error and
// changes nothing.
//
// One step(store, lr), with t = steps() + 1 and g the gradient of the last
// complete set as read from the store (store grads are never written):
//   1. total = sqrt(sum over every trainable leaf of sum g^2), accumulated in
//      double, returned rounded to f32. If any gradient element is not finite,
//      throw ctg::error naming the first such leaf (in Step::wrt order) and
//      change nothing: no parameter, master, moment or the step count. If a
//      narrow parameter no longer holds its master's rounding (written since
//      the last update), the same (see above).
//   2. if max_grad_norm > 0: coef = min(max_grad_norm / (total + 1e-6f), 1)
//      in f32, and g = g * coef (as clip_grad_norm_ scales the grads in place).
//   3. per element, in f32, in PyTorch's operation order, with the scalar
//      coefficients computed in double and rounded to f32 once (as PyTorch
//      does with Python floats), wd 0 for a leaf config.decay excludes:
//        p = p * (1 - lr*wd)
//        m = m * b1 + (1 - b1) * g
//        v = v * b2 + ((1 - b2) * g) * g
//        denom = sqrt(v) / sqrt(1 - b2^t) + eps
//        p = p + (-(lr / (1 - b1^t)) * m) / denom
// PyTorch's vectorized CPU kernels fuse some of these into FMAs, so results
// agree with PyTorch to about 1 ulp per operation, not bit for bit; ctg's
// update fuses none (g++: CTG_HOT_BEGIN, core/config.hpp; GPU: --fmad=false).
//
// Speed: per leaf one read-only pass (sum of squares, 8 partial sums) and one
// update pass in blocks of 256 elements (moments / sqrt / parameters, each a
// loop that vectorizes); no allocation, no virtual calls.
//
// An f64 leaf also gets an f32 master (state is f32): its value is then only
// f32-precise after the first step.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#if defined(__SSE__) || defined(_M_X64)
#include <xmmintrin.h>
#endif

#include <ctg/core/config.hpp>
#include <ctg/core/error.hpp>
#include <ctg/graph/stack.hpp>
#include <ctg/graph/step.hpp>

namespace ctg::optim {

// The trainable leaves weight decay applies to.
enum class decay_leaves : std::int64_t {
  every_leaf = 0,  // torch.optim.AdamW over one param group
  // Leaves of two dims or more in each layer (a stack's leading layer dims
  // not counted): linear and embedding weights decay; biases and norm scales
  // do not (GPT-2's recipe, as nanoGPT and llm.c group their parameters).
  matrices = 1,
};

struct adamw_config {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
  float max_grad_norm = 0.0f;  // 0: no clipping
  decay_leaves decay = decay_leaves::every_leaf;

  // Throws ctg::error for a value torch.optim.AdamW would also reject (or that
  // is not finite): lr < 0, beta outside [0, 1), eps < 0, weight_decay < 0,
  // max_grad_norm < 0.
  void validate() const {
    auto bad = [](const char* what, float v, const char* expected) {
      throw error(std::string("ctg: adamw: ") + what + " must be " + expected + ", found " + std::to_string(v));
    };
    if (!(std::isfinite(lr) && lr >= 0.0f)) bad("lr", lr, "finite and >= 0");
    if (!(beta1 >= 0.0f && beta1 < 1.0f)) bad("beta1", beta1, "in [0, 1)");
    if (!(beta2 >= 0.0f && beta2 < 1.0f)) bad("beta2", beta2, "in [0, 1)");
    if (!(std::isfinite(eps) && eps >= 0.0f)) bad("eps", eps, "finite and >= 0");
    if (!(std::isfinite(weight_decay) && weight_decay >= 0.0f)) bad("weight_decay", weight_decay, "finite and >= 0");
    if (!(std::isfinite(max_grad_norm) && max_grad_norm >= 0.0f))
      bad("max_grad_norm", max_grad_norm, "finite and >= 0 (0: no clipping)");
    if (decay != decay_leaves::every_leaf && decay != decay_leaves::matrices)
      throw error("ctg: adamw: decay must be decay_leaves::every_leaf (0) or decay_leaves::matrices (1), found " +
                  std::to_string(static_cast<std::int64_t>(decay)));
  }
};

template <step_store Store>
class adamw;

}  // namespace ctg::optim

namespace ctg::detail {
template <class T>
inline constexpr bool has_master_copy = !std::is_same_v<T, f32>;

// 64-byte aligned floats, zero-initialised.
class float_buffer {
 public:
  explicit float_buffer(std::size_t n) : n_(n) {
    if (n) {
      p_.reset(static_cast<float*>(::operator new[](n * sizeof(float), std::align_val_t{64})));
      std::memset(p_.get(), 0, n * sizeof(float));
    }
  }
  float_buffer(const float_buffer& o) : float_buffer(o.n_) {
    if (n_) std::memcpy(p_.get(), o.p_.get(), n_ * sizeof(float));
  }
  float_buffer(float_buffer&&) noexcept = default;
  float_buffer& operator=(const float_buffer& o) {
    if (this != &o) *this = float_buffer(o);
    return *this;
  }
  float_buffer& operator=(float_buffer&&) noexcept = default;
  float* data() { return p_.get(); }
  const float* data() const { return p_.get(); }

 private:
  struct deleter {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<float[], deleter> p_;
  std::size_t n_ = 0;
};

// Sum of squares in double, with 8 independent partial sums (a fixed order,
// so the result does not depend on the compiler; and a loop it can vectorize).
template <class T>
inline double sum_of_squares(const T* __restrict g, std::size_t n) {
  double acc[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (std::size_t k = 0; k < 8; ++k) {
      const double x = static_cast<double>(load_as<T>(g[i + k]));
      acc[k] += x * x;
    }
  for (std::size_t k = 0; k < 8 && i < n; ++i, ++k) {  // (k < 8 always holds; it tells the compiler so)
    const double x = static_cast<double>(load_as<T>(g[i]));
    acc[k] += x * x;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// The first element of a narrow parameter that no longer holds what its
// master gives (n if none), compared at the narrower of the two precisions
// (T's for bf16/f16/fp8, f32's for f64); NaN matches NaN.
template <class T>
inline std::size_t first_master_mismatch(const T* p, const float* w, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float a = static_cast<float>(load_as<T>(p[i]));
    const float b = sizeof(T) > sizeof(float) ? w[i] : static_cast<float>(load_as<T>(store_as<T>(w[i])));
    if (!(a == b || (a != a && b != b))) return i;
  }
  return n;
}

// The per-step scalars, each rounded to f32 once.
struct adamw_coeffs {
  float grad_scale;  // clip coefficient (1 when not clipping)
  float decay;       // 1 - lr * wd
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^t)
};

CTG_HOT_BEGIN  // (each a*b+c of the update rounded twice, with or without FMA: core/config.hpp)

// out[i] = sqrt(in[i]) for in[i] >= 0. A separate loop because g++ keeps a
// loop with std::sqrt scalar unless -fno-math-errno (sqrt of a negative sets
// errno); the SSE instruction is IEEE sqrt, correctly rounded, like std::sqrt.
inline void sqrt_block(float* __restrict out, const float* __restrict in, std::size_t n) {
#if defined(__SSE__) || defined(_M_X64)
  const std::size_t vec = n / 4;
  for (std::size_t j = 0; j < vec; ++j) _mm_storeu_ps(out + 4 * j, _mm_sqrt_ps(_mm_loadu_ps(in + 4 * j)));
  for (std::size_t i = 4 * vec; i < n; ++i) out[i] = std::sqrt(in[i]);
#else
  for (std::size_t i = 0; i < n; ++i) out[i] = std::sqrt(in[i]);
#endif
}

// The scalars of update t (1-based), lr and the global norm `total`.
inline adamw_coeffs adamw_coeffs_for(const optim::adamw_config& cfg, float lr, std::int64_t t, float total) {
  const double b1 = cfg.beta1, b2 = cfg.beta2;
  const double bias_correction1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(b2, static_cast<double>(t));
  adamw_coeffs c{};
  c.grad_scale = 1.0f;
  if (cfg.max_grad_norm > 0.0f) c.grad_scale = std::min(cfg.max_grad_norm / (total + 1e-6f), 1.0f);
  c.decay = static_cast<float>(1.0 - static_cast<double>(lr) * static_cast<double>(cfg.weight_decay));
  c.beta1 = cfg.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - b1);
  c.beta2 = cfg.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - b2);
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = cfg.eps;
  c.neg_step_size = static_cast<float>(-(static_cast<double>(lr) / bias_correction1));
  return c;
}

// Leaf L's coefficients, of the step's graph of Nodes: without weight decay
// where config.decay excludes L (1 - lr*0 is 1, as PyTorch's group of
// weight_decay 0 computes it).
template <class Nodes, class L>
adamw_coeffs adamw_coeffs_of_leaf(adamw_coeffs c, const optim::adamw_config& cfg) {
  if (cfg.decay == optim::decay_leaves::matrices && per_layer_rank<Nodes, L> < 2) c.decay = 1.0f;
  return c;
}

// One leaf's update from gradient g (in T, or f32 when reduced over
// replicas: G). `w` is the master (the parameter itself for f32 leaves);
// `param` receives the master rounded to T when T is not f32. Blocks of 256
// elements in three loops: moments, sqrt, parameters (each vectorizes).
template <class T, class G = T>
inline void adamw_update(const G* __restrict g, float* __restrict w, float* __restrict m, float* __restrict v,
                         T* __restrict param, std::size_t n, const adamw_coeffs c) {
  constexpr std::size_t block = 256;
  alignas(64) float root[block];
  for (std::size_t b = 0; b < n; b += block) {
    const std::size_t k = std::min(block, n - b);
    const G* __restrict gb = g + b;
    float* __restrict mb = m + b;
    float* __restrict vb = v + b;
    float* __restrict wb = w + b;
    for (std::size_t i = 0; i < k; ++i) {
      const float gi = static_cast<float>(load_as<G>(gb[i])) * c.grad_scale;
      mb[i] = mb[i] * c.beta1 + c.one_minus_beta1 * gi;
      vb[i] = vb[i] * c.beta2 + (c.one_minus_beta2 * gi) * gi;
    }
    sqrt_block(root, vb, k);
    for (std::size_t i = 0; i < k; ++i) {
      const float denom = root[i] / c.bias_correction2_sqrt + c.eps;
      wb[i] = wb[i] * c.decay + (c.neg_step_size * mb[i]) / denom;
    }
    if constexpr (has_master_copy<T>) {
      T* __restrict pb = param + b;
      for (std::size_t i = 0; i < k; ++i) pb[i] = store_as<T>(wb[i]);
    }
  }
}
CTG_HOT_END

// Where each trainable leaf's state lies in one float buffer (in order of
// Trainable): exp_avg, exp_avg_sq and (non-f32 leaves) the master, each
// region padded to 64 bytes; shared by the CPU and CUDA optimizers.
template <std::size_t NT>
struct adamw_layout {
  static constexpr std::size_t npos = ~std::size_t(0);
  std::size_t exp_avg[NT]{}, exp_avg_sq[NT]{}, master[NT]{};
  std::size_t total = 0;     // floats, each region padded to 64 bytes
  std::size_t elements = 0;  // floats, without padding
};
template <class Trainable>
consteval auto adamw_state_layout() {
  adamw_layout<(Trainable::size > 0 ? Trainable::size : 1)> l;
  auto pad = [](std::size_t n) { return (n + 15) / 16 * 16; };
  [&]<class... Ls>(tl::list<Ls...>) {
    std::size_t k = 0;
    auto one = [&]<class L>(std::type_identity<L>) {
      const std::size_t n = L::dims::static_numel;
      l.exp_avg[k] = l.total;
      l.total += pad(n);
      l.exp_avg_sq[k] = l.total;
      l.total += pad(n);
      l.elements += 2 * n;
      if (has_master_copy<typename L::dtype>) {
        l.master[k] = l.total;
        l.total += pad(n);
        l.elements += n;
      } else {
        l.master[k] = l.npos;
      }
      ++k;
    };
    (one(std::type_identity<Ls>{}), ...);
  }(Trainable{});
  return l;
}

// A step's lr (the configured one, or a schedule's), checked before anything is touched.
inline void check_adamw_lr(float lr) {
  if (!(std::isfinite(lr) && lr >= 0.0f))
    throw error("ctg: adamw: lr must be finite and >= 0, found " + std::to_string(lr) + "; nothing was updated");
}

// The configuration and the step count of an AdamW optimizer (this file's,
// and the GPU's: optim/cuda/adamw.cuh).
class adamw_counters {
 public:
  // The number of successful steps taken (PyTorch's state["step"]).
  std::int64_t steps() const { return steps_; }
  // Sets it (dist::sharded_adamw, gathering its shards into one optimizer to save).
  void set_steps(std::int64_t t) {
    if (t < 0) throw error("ctg: adamw: set_steps: a step count is >= 0, found " + std::to_string(t));
    steps_ = t;
  }
  const optim::adamw_config& config() const { return cfg_; }
  void set_config(const optim::adamw_config& c) {
    c.validate();
    cfg_ = c;
  }

  // Throws ctg::error unless the step count is >= 0 and the configuration is
  // valid (adamw_config::validate). A load calls it before it commits.
  void validate_state() const {
    if (steps_ < 0)
      throw error("ctg: adamw: scalar 'adamw.step': expected a count >= 0, found " + std::to_string(steps_));
    cfg_.validate();
  }
  // Throws ctg::error unless s is the store this optimizer was made for (an
  // update, a save or a load with another's applies or pairs this one's
  // state with another's parameters).
  template <class Store>
  void check_store(const Store& s) const {
    if constexpr (requires { s.identity(); })
      if (s.identity() != store_)
        throw error("ctg: adamw: this optimizer was made for another store (its moments, masters and step count "
                    "are that store's; a store moved from is none): make an optimizer for each store; nothing "
                    "was changed");
  }

 protected:
  explicit adamw_counters(const optim::adamw_config& c) : cfg_(c) { cfg_.validate(); }

  // The scalars of the checkpoint records (ctg/io/checkpoint.hpp), after the
  // per-leaf state: the step count, then the configuration.
  template <class Self, class Records>
  static void scalar_records(Self& self, Records& r) {
    r.scalar("adamw.step", self.steps_);
    r.scalar("adamw.lr", self.cfg_.lr);
    r.scalar("adamw.beta1", self.cfg_.beta1);
    r.scalar("adamw.beta2", self.cfg_.beta2);
    r.scalar("adamw.eps", self.cfg_.eps);
    r.scalar("adamw.weight_decay", self.cfg_.weight_decay);
    r.scalar("adamw.max_grad_norm", self.cfg_.max_grad_norm);
    r.scalar("adamw.decay", self.cfg_.decay, 3, optim::decay_leaves::every_leaf);  // (older files: every leaf's)
  }
  // The store an optimizer is made for (its identity()): an update of
  // another is an error. (It applied this store's moments, masters and
  // step count to the other's parameters.)
  template <class Store>
  void bind_to(const Store& s) {
    if constexpr (requires { s.identity(); }) {
      s.check_not_moved_from();
      store_ = s.identity();
    }
  }
  optim::adamw_config cfg_;
  std::int64_t steps_ = 0;
  std::uint64_t store_ = 0;
};

// Throws unless the store holds a complete set of gradients not applied yet.
template <class Store>
void check_adamw_grads_complete(const Store& s) {
  if constexpr (requires { s.in_replica_group(); })
    if (s.in_replica_group())
      throw error("ctg: adamw: this store runs as a data-parallel replica (dist::data_parallel): its gradients are "
                  "its share of the global batch's, not yet summed over the ranks; use dist::sharded_adamw(dp); "
                  "nothing was updated");
  const std::uint32_t have = s.accumulated(), want = s.micro_batches();
  if (have == 0)
    throw error("ctg: adamw: no gradients since the last update (each set is applied once): run a step first; "
                "nothing was updated");
  if (have != want)
    throw error("ctg: adamw: the gradients hold " + std::to_string(have) + " of " + std::to_string(want) +
                " micro-batches (store.accumulate(" + std::to_string(want) + ")): run the rest first; nothing "
                "was updated");
}

// The errors of a step's first pass, naming the leaf (out of line: one copy, not one a leaf).
[[noreturn]] inline void throw_adamw_not_finite(const char* name, std::size_t i, double x) {
  throw error(std::string("ctg: adamw: the gradient of '") + name + "' is not finite (element " +
              std::to_string(i) + " is " + std::to_string(x) + "); nothing was updated");
}
[[noreturn]] inline void throw_adamw_norm_overflow(const char* name) {
  throw error(std::string("ctg: adamw: the sum of squares of the gradient of '") + name +
              "' overflows; nothing was updated");
}
[[noreturn]] inline void throw_adamw_master_written(const char* name, std::size_t i, double holds,
                                                    float master) {
  throw error(std::string("ctg: adamw: parameter '") + name +
              "' was written after the optimizer last set it (element " + std::to_string(i) + " holds " +
              std::to_string(holds) + ", its f32 master " + std::to_string(master) +
              "): an update would undo the write. Take the written values as masters (opt.sync_masters(store)) "
              "or load the optimizer's state with them (io::load(path, store, opt)); nothing was updated");
}
}  // namespace ctg::detail

namespace ctg::optim {
template <step_store Store>
class adamw : public detail::adamw_counters {
 public:
  using store_type = Store;
  using step_type = typename Store::step_type;
  using trainable = typename step_type::wrt;  // the leaves that get state, in order

  // True for the leaves this optimizer keeps moments for (the step's wrt leaves).
  template <class L>
  static constexpr bool has_state = tl::contains<L, trainable>::value;
  // True for trainable leaves whose dtype is not f32 (they keep an f32 master copy).
  template <class L>
  static constexpr bool has_master = has_state<L> && detail::has_master_copy<typename L::dtype>;

  // Takes the masters from the store's current parameters: initialise them first.
  explicit adamw(Store& s, adamw_config cfg = {}) : adamw_counters(cfg), state_(layout.total) {
    static_assert(trainable::size > 0 || std::is_same_v<step_type, invalid_step>,  // (invalid: already reported)
                  "ctg: adamw needs a step with trainable leaves (value_and_grad)");
    bind_to(s);
    sync_masters(s);
  }

  // One update with the configured lr. Returns the global gradient norm before clipping.
  float step(Store& s) { return step(s, cfg_.lr); }
  // A store of another step (its own optimizer's): one error, not a list of
  // the overloads that do not match.
  template <class Other>
    requires(!std::is_base_of_v<Store, Other>)
  float step(Other&, float = 0.0f) {
    static_assert(sizeof(Other) == 0,
                  "ctg: this optimizer belongs to a store of another step: make one per store "
                  "(ctg::optim::adamw opt(store, ...))");
    return 0.0f;
  }

  // One update with this lr (e.g. from a schedule). Returns the global
  // gradient norm before clipping. Throws ctg::error, changing nothing, when
  // a gradient is not finite or lr is not finite and >= 0.
  float step(Store& s, float lr) {
    check_store(s);
    const auto alone = s.hold_alone();  // (no step runs meanwhile)
    detail::check_adamw_lr(lr);
    detail::check_adamw_grads_complete(s);
    // Pass 1: read only. Norm and finiteness of every gradient.
    double total_sq = 0.0;
    for_each_trainable([&]<std::size_t K, class L>() {
      const auto g = s.template grad<L>();
      const double ss = detail::sum_of_squares(g.data(), g.size());
      if (!std::isfinite(ss)) throw_not_finite<L>(g);
      total_sq += ss;
      if constexpr (detail::has_master_copy<typename L::dtype>) check_master<K, L>(s);
    });
    if (!std::isfinite(total_sq)) throw error("ctg: adamw: the global gradient norm overflows; nothing was updated");
    const float total = static_cast<float>(std::sqrt(total_sq));

    // Pass 2: nothing below throws.
    const std::int64_t t = steps_ + 1;
    const detail::adamw_coeffs step_coeffs = detail::adamw_coeffs_for(cfg_, lr, t, total);
    for_each_trainable([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      const auto c = detail::adamw_coeffs_of_leaf<typename step_type::nodes, L>(step_coeffs, cfg_);
      const auto g = s.template grad<L>();
      const auto p = s.template param<L>();
      float* m = state_.data() + layout.exp_avg[K];
      float* v = state_.data() + layout.exp_avg_sq[K];
      if constexpr (detail::has_master_copy<T>)
        detail::adamw_update<T>(g.data(), state_.data() + layout.master[K], m, v, p.data(), p.size(), c);
      else
        detail::adamw_update<T>(g.data(), p.data(), m, v, nullptr, p.size(), c);
    });
    steps_ = t;
    s.consume_grads();
    return total;
  }

  template <class L>
  std::span<const float> exp_avg() const {
    if constexpr (state_leaf<L>()) return {state_.data() + layout.exp_avg[index<L>], numel<L>()};
    else return {};
  }
  template <class L>
  std::span<const float> exp_avg_sq() const {
    if constexpr (state_leaf<L>()) return {state_.data() + layout.exp_avg_sq[index<L>], numel<L>()};
    else return {};
  }
  // The f32 master of a trainable leaf whose dtype is not f32. (An f32 leaf
  // is its own master: read store.param<L>().)
  template <class L>
  std::span<const float> master() const {
    if constexpr (state_leaf<L>()) {
      static_assert(detail::has_master_copy<typename L::dtype>,
                    "ctg: an f32 parameter is its own master copy: read store.param<L>()");
      return {state_.data() + layout.master[index<L>], numel<L>()};
    } else {
      return {};
    }
  }

  // Re-take every master from the store's parameters (after writing them:
  // re-initialising, a params-only load). Moments and the step count are kept.
  void sync_masters(Store& s) {
    check_store(s);
    const auto alone = s.hold_alone();  // (no step runs meanwhile)
    for_each_trainable([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      if constexpr (detail::has_master_copy<T>) {
        const auto p = s.template param<L>();
        float* w = state_.data() + layout.master[K];
        for (std::size_t i = 0; i < p.size(); ++i) w[i] = static_cast<float>(load_as<T>(p[i]));
      }
    });
  }

  // The number of state floats (moments and masters, without padding).
  static constexpr std::size_t state_elements() { return layout.elements; }

  // The checkpoint hook (ctg/io/checkpoint.hpp): names every piece of state
  // as a state-file record. Per trainable leaf L, in Step::wrt order:
  // "master" (non-f32 leaves only), "exp_avg", "exp_avg_sq"; then the scalars
  // "adamw.step" (i64) and "adamw.lr", "adamw.beta1", "adamw.beta2",
  // "adamw.eps", "adamw.weight_decay", "adamw.max_grad_norm" (f32),
  // "adamw.decay" (i64: decay_leaves).
  template <class Records>
  void state_records(Records& r) {
    describe_state(*this, r);
  }
  template <class Records>
  void state_records(Records& r) const {
    describe_state(*this, r);
  }

 private:
  template <class Self, class Records>
  static void describe_state(Self& self, Records& r) {
    for_each_trainable([&]<std::size_t K, class L>() {
      auto region = [&](std::size_t offset) { return std::span(self.state_.data() + offset, numel<L>()); };
      if constexpr (detail::has_master_copy<typename L::dtype>) r.template leaf<"master", L>(region(layout.master[K]));
      r.template leaf<"exp_avg", L>(region(layout.exp_avg[K]));
      r.template leaf<"exp_avg_sq", L>(region(layout.exp_avg_sq[K]));
    });
    scalar_records(self, r);
  }

  template <class L>
  static constexpr std::size_t numel() {
    return L::dims::static_numel;
  }
  template <class L>
  static constexpr std::size_t index = tl::index_of<L, trainable>::value;

  // One plain message per misuse: frozen first, then "not trainable in this step".
  template <class L>
  static consteval bool state_leaf() {
    constexpr bool frozen = is_leaf_v<L> && L::role == leaf_role::frozen;
    static_assert(!frozen, "ctg: frozen parameter: a frozen leaf has no optimizer state");
    if constexpr (frozen) {
      return false;
    } else {
      static_assert(tl::contains<L, trainable>::value,
                    "ctg: no optimizer state: this leaf is not trainable in this step (not in its wrt<...>)");
      return tl::contains<L, trainable>::value;
    }
  }

  static constexpr auto layout = detail::adamw_state_layout<trainable>();

  // f.template operator()<K, L>() for every trainable leaf L, K its index.
  template <class F>
  static void for_each_trainable(F&& f) {
    tl::for_each_indexed<trainable>(f);
  }

  // Throws unless trainable leaf L (index K) holds what its master gives.
  template <std::size_t K, class L>
  void check_master(Store& s) const {
    const auto p = s.template param<L>();
    const float* w = state_.data() + layout.master[K];
    const std::size_t i = detail::first_master_mismatch(p.data(), w, p.size());
    if (i == p.size()) return;
    detail::throw_adamw_master_written(L::name.c_str(), i, static_cast<double>(load_as(p[i])), w[i]);
  }

  template <class L, class G>
  [[noreturn]] static void throw_not_finite(G g) {
    for (std::size_t i = 0; i < g.size(); ++i) {
      const double x = static_cast<double>(load_as(g[i]));
      if (!std::isfinite(x)) detail::throw_adamw_not_finite(L::name.c_str(), i, x);
    }
    detail::throw_adamw_norm_overflow(L::name.c_str());
  }

  detail::float_buffer state_;
};

}  // namespace ctg::optim
