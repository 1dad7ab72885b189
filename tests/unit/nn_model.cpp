// The transformer model: gradients of every parameter against finite
// differences (f64 policy), and nn::stack against nn::unrolled (the same
// layers as separate nodes): equal losses and gradients, and a stack's type
// that does not depend on the number of layers.
#include <cstring>
#include <string>

#include "grad_check.hpp"

namespace {
using ctg::dyn;
using ctg::i32;

struct small_config {
  static constexpr ctg::dim_t vocab = 7, max_seq = 5, dim = 4, heads = 2, head_dim = 3, hidden = 6;
  static constexpr std::size_t layers = 2;
};
struct one_layer : small_config {
  static constexpr std::size_t layers = 1;
};
struct four_layers : small_config {
  static constexpr std::size_t layers = 4;
};
using Ids = ctg::input<"ids", i32, dyn, dyn>;
using Pos = ctg::input<"pos", i32, dyn>;
using Tg = ctg::input<"targets", i32, dyn, dyn>;

const std::vector<i32> ids{1, 4, 4, 0, 6, 2, 2, 5};  // batch 2, T 4
const std::vector<i32> pos{0, 1, 2, 3};
const std::vector<i32> targets{4, 4, 0, 6, 2, -100, 5, 1};  // one ignored

template <class Step, class Store>
double run(Step& step, Store& st) {
  return step(st, ctg::feed<Ids>(ids, 2, 4), ctg::feed<Pos>(pos, 4), ctg::feed<Tg>(targets, 2, 4));
}

// Checks every trainable leaf's gradient by central differences.
template <class Step, class Store>
void check_all_grads(Step& step, Store& st) {
  [&]<class... Ps>(ctg::tl::list<Ps...>) {
    auto one = [&]<class P>(std::type_identity<P>) {
      INFO("parameter " << P::name.c_str());
      gc::check_grad<P>(step, st, gc::f64_tol, ctg::feed<Ids>(ids, 2, 4), ctg::feed<Pos>(pos, 4),
                        ctg::feed<Tg>(targets, 2, 4));
    };
    (one(std::type_identity<Ps>{}), ...);
  }(typename Step::wrt{});
}
}  // namespace

TEST_CASE("transformer (f64 policy, stacked blocks): every parameter's gradient matches finite differences") {
  using M = ctg::nn::transformer<small_config, ctg::precision::full<ctg::f64>>;
  auto loss = M::loss(Ids{}, Pos{}, Tg{});
  static_assert(std::is_same_v<ctg::dtype_t<decltype(loss)>, ctg::f64>);
  using params = ctg::params_t<decltype(loss)>;
  // tok, pos, 9 stacked block leaves, ln_f, lm_head
  static_assert(params::size == 13);
  using WQ = ctg::param<"layers.{i}.attn.wq", ctg::f64, 2, 2, 4, 3>;
  static_assert(ctg::has_grad_path_v<decltype(loss), WQ>);
  auto step = ctg::value_and_grad(loss);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  ctg::nn::init_params(st, 1, 0.5);  // large weights: non-trivial attention patterns
  gc::rng rng(2);
  for (auto& s : st.param<ctg::param<"layers.{i}.ln1.scale", ctg::f64, 2, 4>>()) s = rng.uniform(0.5, 1.5);
  const double l = run(step, st);
  CHECK(std::isfinite(l));
  check_all_grads(step, st);
}

namespace {
// Copy every unrolled leaf's values into the stacked store ("layers.k.x" -> slice k of "layers.{i}.x").
template <class UStore, class SStore>
void copy_params(UStore& us, SStore& ss) {
  using unodes = typename UStore::step_type::nodes;
  using snodes = typename SStore::step_type::nodes;
  [&]<class... Us>(ctg::tl::list<Us...>) {
    auto one = [&]<class U>(std::type_identity<U>) {
      if constexpr (!U::fed) {
        std::string name = U::name.c_str();
        std::size_t layer = 0;
        bool stacked = false;
        if (name.rfind("layers.", 0) == 0) {
          const std::size_t dot = name.find('.', 7);
          layer = std::stoul(name.substr(7, dot - 7));
          name = "layers.{i}" + name.substr(dot);
          stacked = true;
        }
        bool found = false;
        [&]<class... Ss>(ctg::tl::list<Ss...>) {
          auto match = [&]<class S>(std::type_identity<S>) {
            if constexpr (!S::fed) {
              if (name != S::name.c_str()) return;
              found = true;
              auto src = us.template param<U>();
              auto dst = ss.template param<S>();
              REQUIRE(dst.size() >= (layer + 1) * src.size());
              std::copy(src.begin(), src.end(), dst.begin() + layer * src.size());
            }
          };
          (match(std::type_identity<Ss>{}), ...);
        }(ctg::leaves_t<snodes>{});
        CHECK_MESSAGE(found, "no stacked leaf for " << U::name.c_str());
      }
    };
    (one(std::type_identity<Us>{}), ...);
  }(ctg::leaves_t<unodes>{});
}
}  // namespace

TEST_CASE_TEMPLATE("stack<N, block> equals the unrolled layers: loss and every gradient, bit for bit", P,
                   ctg::precision::full<ctg::f32>, ctg::precision::autocast<ctg::bf16>) {
  using M = ctg::nn::transformer<one_layer, P>;
  auto sloss = ctg::nn::cross_entropy(M::logits(Ids{}, Pos{}), Tg{});
  auto uloss = ctg::nn::cross_entropy(M::logits_unrolled(Ids{}, Pos{}), Tg{});
  auto sstep = ctg::value_and_grad(sloss);
  auto ustep = ctg::value_and_grad(uloss);
  ctg::cpu::device dev;
  auto ss = ctg::make_store(dev, sstep);
  auto us = ctg::make_store(dev, ustep);
  ctg::nn::init_params(us, 3, 0.3);
  copy_params(us, ss);
  const float ls = run(sstep, ss), lu = run(ustep, us);
  CHECK(ls == lu);
  // Gradients: the unrolled layer k's gradient is slice k of the stacked one.
  using T = typename P::param_type;
  using SW1 = ctg::param<"layers.{i}.mlp.w1", T, 1, 4, 6>;
  using UW1 = ctg::param<"layers.0.mlp.w1", T, 4, 6>;
  using SWQ = ctg::param<"layers.{i}.attn.wq", T, 1, 2, 4, 3>;
  using UWQ = ctg::param<"layers.0.attn.wq", T, 2, 4, 3>;
  using STOK = ctg::param<"tok.weight", T, 7, 4>;
  const auto sw1 = gc::to_vec(ss.template grad<SW1>());
  CHECK(sw1 == gc::to_vec(us.template grad<UW1>()));
  CHECK(gc::to_vec(ss.template grad<SWQ>()) == gc::to_vec(us.template grad<UWQ>()));
  CHECK(gc::to_vec(ss.template grad<STOK>()) == gc::to_vec(us.template grad<STOK>()));
  double norm = 0;
  for (double g : sw1) norm += g * g;
  CHECK(norm > 0);  // the comparison is not between two zero vectors
}

namespace {
// A small residual block, cheap enough to unroll three times.
template <ctg::fixed_string Prefix>
struct mlp_block {
  template <ctg::expr X>
  constexpr auto operator()(X x) const {
    using P = ctg::precision::full<ctg::f32>;
    return x + ctg::nn::linear<Prefix + ".down", 4, P>(ctg::silu(ctg::nn::linear<Prefix + ".up", 6, P, ctg::nn::bias::with>(
                   ctg::nn::rms_norm<Prefix + ".norm", P>(x))));
  }
};
}  // namespace

TEST_CASE("stack<3> of a residual block equals three unrolled blocks, bit for bit; layers get their own gradients") {
  using X = ctg::input<"x", ctg::f32, dyn, 4>;
  using R = ctg::input<"r", ctg::f32, dyn, 4>;
  auto sstep = ctg::value_and_grad(ctg::sum(ctg::nn::stack<3, mlp_block>(X{}) * R{}));
  auto ustep = ctg::value_and_grad(ctg::sum(ctg::nn::unrolled<3, mlp_block>(X{}) * R{}));
  ctg::cpu::device dev;
  auto ss = ctg::make_store(dev, sstep);
  auto us = ctg::make_store(dev, ustep);
  ctg::nn::init_params(us, 9, 0.5);
  copy_params(us, ss);
  gc::rng rng(4);
  const auto x = gc::data_of<float>(rng.vec(20, -1, 1)), r = gc::data_of<float>(rng.vec(20, -1, 1));
  CHECK(sstep(ss, ctg::feed<X>(x, 5), ctg::feed<R>(r, 5)) == ustep(us, ctg::feed<X>(x, 5), ctg::feed<R>(r, 5)));
  using SUp = ctg::param<"layers.{i}.up.weight", ctg::f32, 3, 4, 6>;
  using SB = ctg::param<"layers.{i}.up.bias", ctg::f32, 3, 6>;
  const auto g = gc::to_vec(ss.grad<SUp>()), gb = gc::to_vec(ss.grad<SB>());
  CHECK(std::vector<double>(g.begin(), g.begin() + 24) == gc::to_vec(us.grad<ctg::param<"layers.0.up.weight", ctg::f32, 4, 6>>()));
  CHECK(std::vector<double>(g.begin() + 24, g.begin() + 48) == gc::to_vec(us.grad<ctg::param<"layers.1.up.weight", ctg::f32, 4, 6>>()));
  CHECK(std::vector<double>(g.begin() + 48, g.end()) == gc::to_vec(us.grad<ctg::param<"layers.2.up.weight", ctg::f32, 4, 6>>()));
  CHECK(std::vector<double>(gb.begin() + 6, gb.begin() + 12) == gc::to_vec(us.grad<ctg::param<"layers.1.up.bias", ctg::f32, 6>>()));
  CHECK(std::vector<double>(g.begin(), g.begin() + 24) != std::vector<double>(g.begin() + 24, g.begin() + 48));
}

TEST_CASE("a stack's type, and its compiled graphs, do not depend on the number of layers") {
  using M2 = ctg::nn::transformer<small_config, ctg::precision::full<ctg::f32>>;
  using M4 = ctg::nn::transformer<four_layers, ctg::precision::full<ctg::f32>>;
  using L2 = decltype(M2::loss(Ids{}, Pos{}, Tg{}));
  using L4 = decltype(M4::loss(Ids{}, Pos{}, Tg{}));
  static_assert(ctg::topo_t<ctg::tl::list<L2>>::size == ctg::topo_t<ctg::tl::list<L4>>::size);
  static_assert(ctg::group_count_v<decltype(ctg::value_and_grad(L2{}))> ==
                ctg::group_count_v<decltype(ctg::value_and_grad(L4{}))>);
  // the stacked leaves carry the layer count as their leading dim
  static_assert(ctg::tl::contains_v<ctg::param<"layers.{i}.mlp.w2", ctg::f32, 4, 6, 4>, ctg::params_t<L4>>);
}
