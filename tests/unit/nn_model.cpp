// The transformer model: every parameter's gradient against finite
// differences (f64 policy), and a stack whose type does not depend on the
// number of layers.
#include "nn_model_common.hpp"

using namespace nn_model;

TEST_CASE("transformer (f64 policy, stacked blocks): every parameter's gradient matches finite differences") {
  using M = ctg::nn::transformer<small_config, ctg::precision::full<ctg::f64>>;
  auto loss = M::loss(Ids{}, Pos{}, Tg{});
  static_assert(std::is_same_v<ctg::dtype_t<decltype(loss)>, ctg::f64>);
  using params = ctg::params_t<decltype(loss)>;
  // tok, pos, 9 stacked block leaves, ln_f, lm_head
  static_assert(params::size == 13);
  using WQ = ctg::param<"layers.{i}.attn.wq", ctg::f64, 2, 6, 4>;
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

TEST_CASE("a stack's type, and its compiled graphs, do not depend on the number of layers") {
  using M2 = ctg::nn::transformer<small_config, ctg::precision::full<ctg::f32>>;
  using M4 = ctg::nn::transformer<four_layers, ctg::precision::full<ctg::f32>>;
  using L2 = decltype(M2::loss(Ids{}, Pos{}, Tg{}));
  using L4 = decltype(M4::loss(Ids{}, Pos{}, Tg{}));
  static_assert(ctg::topo_t<ctg::tl::list<L2>>::size == ctg::topo_t<ctg::tl::list<L4>>::size);
  static_assert(ctg::group_count_v<decltype(ctg::value_and_grad(L2{}))> ==
                ctg::group_count_v<decltype(ctg::value_and_grad(L4{}))>);
  // the stacked leaves carry the layer count as their leading dim
  static_assert(ctg::tl::contains<ctg::param<"layers.{i}.mlp.w2", ctg::f32, 4, 6, 4>, ctg::params_t<L4>>::value);
}
