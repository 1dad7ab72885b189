// B4 on the transformer under delayed scaling (see fp8_transformer.hpp).
#include "fp8_transformer.hpp"

TEST_CASE("B4, delayed scaling: checkpointing every layer changes no bit over 6 AdamW steps") {
  fp8_b4::b4_on_transformer<ctg::precision::delayed<4>>();
}

// The projections' quantizers sit in the checkpoint regions that end at q, k
// and v: backward recomputes the weights' quantized copies it reads, with
// the scales forward used, and records no amax.
TEST_CASE("B4, delayed scaling: recomputing attention's scores changes no bit over 6 AdamW steps") {
  fp8_b4::b4_on_transformer<ctg::precision::delayed<4>, fp8_b4::checkpointing::attention_scores>();
}

TEST_CASE("a store knows the node kinds of its step, its stacked blocks' too (a GPU store checks for FP8)") {
  using fp8_store =
      ctg::cpu::store<decltype(fp8_b4::train_step<ctg::precision::delayed<4>, fp8_b4::checkpointing::none>())>;
  static_assert(fp8_store::has_node_kind(ctg::node_kind::fp8_matmul));
  // The attention's products (bf16 matmuls under the fp8 policy) are in the
  // stack's block only: found through it.
  constexpr const auto& t = ctg::schedule<ctg::step_key_t<fp8_store::step_type>>::table;
  bool own_matmul = false;
  for (std::size_t i = 0; i < fp8_store::N; ++i) own_matmul = own_matmul || t.node[i].kind == ctg::node_kind::matmul;
  CHECK_FALSE(own_matmul);
  CHECK(fp8_store::has_node_kind(ctg::node_kind::matmul));
  using bf16_model =
      ctg::nn::transformer<fp8_b4::config<fp8_b4::checkpointing::none>, ctg::precision::autocast<ctg::bf16>>;
  using bf16_store =
      ctg::cpu::store<decltype(ctg::value_and_grad(bf16_model::loss(fp8_b4::Ids{}, fp8_b4::Pos{}, fp8_b4::Tg{})))>;
  static_assert(!bf16_store::has_node_kind(ctg::node_kind::fp8_matmul));
}
