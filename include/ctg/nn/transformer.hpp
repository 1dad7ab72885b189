#pragma once
// A pre-norm decoder-only transformer, composed from the layers:
//
//   block(x) = h + drop(swiglu(rms_norm(h))),  h = x + drop(causal_self_attention(rms_norm(x)))
//   logits   = rms_norm(stack<layers, block>(tok_embed[ids] + pos_embed[pos])) @ lm_head
//   loss     = cross_entropy(logits, targets)
//
// The shape of the model is a config type with static members (see
// tiny_config); the precision policy is a type parameter. The residual
// stream is in the policy's stats type (f32 under autocast<bf16>).
#include <ctg/nn/stack.hpp>
#include <ctg/nn/attention.hpp>
#include <ctg/nn/embedding.hpp>
#include <ctg/nn/loss.hpp>
#include <ctg/nn/mlp.hpp>
#include <ctg/nn/norm.hpp>

namespace ctg::nn {

// An example config; any type with these members works.
struct tiny_config {
  static constexpr dim_t vocab = 128;    // token ids in [0, vocab)
  static constexpr dim_t max_seq = 64;   // positions in [0, max_seq)
  static constexpr dim_t dim = 64;       // model width
  static constexpr dim_t heads = 4;
  static constexpr dim_t head_dim = 16;
  static constexpr dim_t hidden = 172;   // SwiGLU hidden width
  static constexpr std::size_t layers = 2;
  // Optional: checkpointing::every_layer (the default, when absent) recomputes
  // each block in backward instead of keeping its values; attention_scores
  // keeps them but for attention's scores, probabilities and their cast,
  // recomputed from q and k; none keeps everything.
  static constexpr checkpointing checkpoint = checkpointing::every_layer;
  // Optional: attention_kernel::fused computes attention with
  // ctg::causal_attention, keeping no [T, T] values; composed (the default,
  // when absent) as products and a softmax loop (nn/attention.hpp).
  static constexpr attention_kernel attention = attention_kernel::composed;
  // Optional: residual dropout probability (0, the default when absent, adds no
  // node). Masks are keyed by the store's seed and step, the layer
  // and the element ("<prefix>.attn.drop", "<prefix>.mlp.drop").
  static constexpr double dropout = 0.0;
};

}  // namespace ctg::nn

namespace ctg::detail {
template <class Cfg>
consteval checkpointing checkpointing_of() {
  if constexpr (requires { Cfg::checkpoint; }) return Cfg::checkpoint;
  else return checkpointing::every_layer;
}
template <class Cfg>
consteval nn::attention_kernel attention_kernel_of() {
  if constexpr (requires { Cfg::attention; }) return Cfg::attention;
  else return nn::attention_kernel::composed;
}
template <class Cfg>
consteval double dropout_of() {
  if constexpr (requires { Cfg::dropout; }) return Cfg::dropout;
  else return 0.0;
}
// Cfg with no dropout.
template <class Cfg>
struct without_dropout : Cfg {
  static constexpr double dropout = 0.0;
};
}  // namespace ctg::detail

namespace ctg::nn {
template <class Cfg, precision::policy P>
struct transformer {
  static_assert(!std::is_final_v<Cfg>,
                "ctg: a transformer config must not be final: the evaluation model's config derives from it "
                "(the same members, dropout 0)");
  // The same model without dropout, over the same leaves: what evaluation
  // and sampling steps are built from (a store shares a training step's
  // parameters with them: ctg::make_store(dev, train, eval), exec/shared_store.hpp).
  using evaluation =
      transformer<std::conditional_t<std::is_final_v<Cfg>, Cfg, detail::without_dropout<Cfg>>, P>;  // (final: reported)

  // One block; its parameters are named "<Prefix>.attn.wq", "<Prefix>.ln1.scale", ...
  template <fixed_string Prefix>
  struct block {
    template <expr X>
    constexpr auto operator()(X x) const {
      using T = typename X::dtype;
      auto attn = causal_self_attention<Prefix + ".attn", Cfg::heads, Cfg::head_dim, P, detail::checkpointing_of<Cfg>(),
                                        detail::attention_kernel_of<Cfg>()>(rms_norm<Prefix + ".ln1", P>(x));
      auto h = x + dropout<Prefix + ".attn.drop">(cast<T>(attn), lit<detail::dropout_of<Cfg>()>);
      auto mlp = swiglu<Prefix + ".mlp", Cfg::hidden, P>(rms_norm<Prefix + ".ln2", P>(h));
      return h + dropout<Prefix + ".mlp.drop">(cast<T>(mlp), lit<detail::dropout_of<Cfg>()>);
    }
  };

  // The residual stream entering the blocks: token + position embeddings.
  template <expr Ids, expr Pos>
  static constexpr auto embed(Ids ids, Pos pos) {
    using S = typename P::stats_type;
    return cast<S>(embedding<"tok", Cfg::vocab, Cfg::dim, P>(ids)) +
           cast<S>(embedding<"pos", Cfg::max_seq, Cfg::dim, P>(pos));
  }
  template <expr H>
  static constexpr auto head(H h) {
    return linear<"lm_head", Cfg::vocab, P>(rms_norm<"ln_f", P>(h));
  }

  // Logits [batch, T, vocab] for ids [batch, T] and positions [T]; the blocks run as one stack.
  template <expr Ids, expr Pos>
  static constexpr auto logits(Ids ids, Pos pos) {
    return head(stack<Cfg::layers, block, detail::checkpointing_of<Cfg>()>(embed(ids, pos)));
  }
  // The same model with its blocks unrolled (parameters "layers.0...", "layers.1", ...).
  template <expr Ids, expr Pos>
  static constexpr auto logits_unrolled(Ids ids, Pos pos) {
    return head(unrolled<Cfg::layers, block>(embed(ids, pos)));
  }
  template <int Ignore = -100, expr Ids, expr Pos, expr Targets>
  static constexpr auto loss(Ids ids, Pos pos, Targets targets) {
    return cross_entropy<Ignore>(logits(ids, pos), targets);
  }
};

}  // namespace ctg::nn
