// nn::stack keeps every layer's values for backward by default; with
// checkpointing::every_layer it keeps only the layer inputs and recomputes
// each layer in backward; with attention_scores a transformer keeps every
// value but attention's of the scores' size. All must give the same bits,
// and checkpointing must keep fewer bytes.
#include <cstring>
#include <vector>

#include <ctg/lower/describe.hpp>

#include "../common/tiny_transformer.hpp"
#include "grad_check.hpp"
#include "same_state.hpp"

namespace {
using ctg::dyn;
template <ctg::fixed_string Prefix>
struct mlp_block {
  template <ctg::expr X>
  constexpr auto operator()(X x) const {
    using P = ctg::precision::full<typename X::dtype>;
    auto h = ctg::nn::linear<Prefix + ".up", 12, P, ctg::nn::bias::with>(ctg::nn::rms_norm<Prefix + ".norm", P>(x));
    return x + ctg::nn::linear<Prefix + ".down", 4, P>(ctg::silu(h) * ctg::tanh(h));
  }
};
template <class T>
using X = ctg::input<"x", T, dyn, 4>;
template <class T>
using R = ctg::input<"r", T, dyn, 4>;
template <class T, ctg::nn::checkpointing C>
constexpr auto loss() {
  return ctg::sum(ctg::nn::stack<3, mlp_block, C>(X<T>{}) * R<T>{});
}
using Up = ctg::param<"layers.{i}.up.weight", ctg::f32, 3, 4, 12>;
using Down = ctg::param<"layers.{i}.down.weight", ctg::f32, 3, 12, 4>;
using Norm = ctg::param<"layers.{i}.norm.scale", ctg::f32, 3, 4>;
}  // namespace

TEST_CASE("stack<3>: every_layer checkpointing gives the same bits and keeps fewer bytes") {
  using none = ctg::nn::checkpointing;
  auto kstep = ctg::value_and_grad(loss<ctg::f32, none::none>());
  auto cstep = ctg::value_and_grad(loss<ctg::f32, none::every_layer>());
  ctg::cpu::device dev;
  auto ks = ctg::make_store(dev, kstep);
  auto cs = ctg::make_store(dev, cstep);
  ctg::nn::init_params(ks, 3, 0.5);
  ctg::nn::init_params(cs, 3, 0.5);
  gc::rng rng(8);
  for (int batch : {6, 2, 11}) {
    const auto x = gc::data_of<float>(rng.vec(4 * batch, -1, 1)), r = gc::data_of<float>(rng.vec(4 * batch, -1, 1));
    const float lk = kstep(ks, ctg::feed<X<ctg::f32>>(x, batch), ctg::feed<R<ctg::f32>>(r, batch));
    const float lc = cstep(cs, ctg::feed<X<ctg::f32>>(x, batch), ctg::feed<R<ctg::f32>>(r, batch));
    CHECK(std::memcmp(&lk, &lc, sizeof lk) == 0);
    auto same = [](auto a, auto b) { return std::memcmp(a.data(), b.data(), a.size_bytes()) == 0; };
    CHECK(same(ks.grad<Up>(), cs.grad<Up>()));
    CHECK(same(ks.grad<Down>(), cs.grad<Down>()));
    CHECK(same(ks.grad<Norm>(), cs.grad<Norm>()));
    CHECK(cs.kept_bytes() < ks.kept_bytes());
    MESSAGE("batch " << batch << ": kept " << ks.kept_bytes() << " bytes, " << cs.kept_bytes() << " with checkpointing");
  }
}

TEST_CASE("stack<3> gradients match finite differences, kept and checkpointed (f64)") {
  using N = ctg::nn::checkpointing;
  auto check = [](auto step) {
    ctg::cpu::device dev;
    auto st = ctg::make_store(dev, step);
    ctg::nn::init_params(st, 5, 0.5);
    gc::rng rng(2);
    const auto x = rng.vec(12, -1, 1), r = rng.vec(12, -1, 1);
    using U = ctg::param<"layers.{i}.up.weight", ctg::f64, 3, 4, 12>;
    using D = ctg::param<"layers.{i}.down.weight", ctg::f64, 3, 12, 4>;
    gc::check_grad<U>(step, st, gc::f64_tol, ctg::feed<X<ctg::f64>>(x, 3), ctg::feed<R<ctg::f64>>(r, 3));
    gc::check_grad<D>(step, st, gc::f64_tol, ctg::feed<X<ctg::f64>>(x, 3), ctg::feed<R<ctg::f64>>(r, 3));
  };
  check(ctg::value_and_grad(loss<ctg::f64, N::none>()));
  check(ctg::value_and_grad(loss<ctg::f64, N::every_layer>()));
}

namespace {
template <ctg::nn::checkpointing C>
struct scores_config {
  static constexpr ctg::dim_t vocab = 32, max_seq = 16, dim = 16, heads = 2, head_dim = 8, hidden = 24;
  static constexpr std::size_t layers = 2;
  static constexpr ctg::nn::checkpointing checkpoint = C;
  static constexpr double dropout = 0.1;
};
template <ctg::nn::checkpointing C>
using scores_model = ctg::nn::transformer<scores_config<C>, ctg::precision::autocast<ctg::bf16>>;
using test_util::Ids, test_util::Pos, test_util::Tg;
template <ctg::nn::checkpointing C>
using scores_step = decltype(ctg::value_and_grad(scores_model<C>::loss(Ids{}, Pos{}, Tg{})));
}  // namespace

// Selective recompute: the block keeps q, k, v and the heads' outputs (each
// ending a checkpoint region) and recomputes in backward only the scores'
// product and the softmax loop, not the products of the weights nor the
// heads' product with v.
TEST_CASE("a transformer with checkpointing::attention_scores: the same bits, nothing of the scores' size kept") {
  using C = ctg::nn::checkpointing;
  constexpr ctg::dim_t heads = 2;
  {
    const ctg::step_description& block = *ctg::description<scores_step<C::attention_scores>>.blocks[0].step;
    std::size_t scores_products = 0, other_products_recomputed = 0, softmax_recomputed = 0;
    for (std::size_t i = 0; i < block.size(); ++i) {
      const auto& n = block.node[i];
      if (n.backward || n.group == ctg::no_index || block.group[n.group].root != i) continue;
      const bool recomputed = block.group[n.group].recomputed;
      const bool scores_sized = n.dims.rank == 4 && n.dims.d[1] == heads && n.dims.d[2] == n.dims.d[3];
      CAPTURE(n.op);
      if (n.kind == ctg::node_kind::matmul) {
        if (scores_sized) scores_products += recomputed;
        else other_products_recomputed += recomputed;
      }
      if (n.op == "softmax") softmax_recomputed += recomputed && block.group[n.group].side != ctg::no_index;
      if (scores_sized) CHECK(!n.kept);  // the scores, the probabilities, their cast
    }
    CHECK(scores_products == 1);
    CHECK(other_products_recomputed == 0);
    CHECK(softmax_recomputed == 1);  // (writing the probabilities and their bf16 cast)
  }
  auto none = scores_step<C::none>{};
  auto every = scores_step<C::every_layer>{};
  auto scores = scores_step<C::attention_scores>{};
  ctg::cpu::device dev;
  auto sn = ctg::make_store(dev, none);
  auto se = ctg::make_store(dev, every);
  auto ss = ctg::make_store(dev, scores);
  ctg::nn::init_params(sn, 9, 0.3);
  ctg::nn::init_params(se, 9, 0.3);
  ctg::nn::init_params(ss, 9, 0.3);
  for (ctg::dim_t batch : {2, 3}) {
    constexpr ctg::dim_t seq = 12;
    std::vector<ctg::i32> ids(static_cast<std::size_t>(batch * seq)), targets(ids.size()), pos(seq);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<ctg::i32>((i * 7 + 3) % 32), targets[i] = static_cast<ctg::i32>((i * 5 + 1) % 32);
    for (ctg::dim_t t = 0; t < seq; ++t) pos[static_cast<std::size_t>(t)] = static_cast<ctg::i32>(t);
    auto run = [&](auto& step, auto& store) {
      return step(store, ctg::feed<Ids>(ids, batch, seq), ctg::feed<Pos>(pos, seq), ctg::feed<Tg>(targets, batch, seq));
    };
    const float ln = run(none, sn), le = run(every, se), ls = run(scores, ss);
    CAPTURE(batch);
    CHECK(std::isfinite(ls));
    CHECK(std::memcmp(&ln, &ls, sizeof ln) == 0);
    CHECK(std::memcmp(&le, &ls, sizeof le) == 0);
    same_state::check_same_state(sn, ss);
    same_state::check_same_state(se, ss);
    // Fewer bytes kept than with none by at least the probabilities in f32
    // and bf16 (the scores themselves backward never read), more than with
    // every layer recomputed.
    const std::size_t probs_bytes = 2 * static_cast<std::size_t>(batch * heads * seq * seq) * (4 + 2);
    CHECK(ss.kept_bytes() + probs_bytes <= sn.kept_bytes());
    CHECK(se.kept_bytes() < ss.kept_bytes());
    MESSAGE("batch " << batch << ": kept " << sn.kept_bytes() << " bytes (none), " << ss.kept_bytes()
                     << " (attention_scores), " << se.kept_bytes() << " (every_layer)");
  }
}
