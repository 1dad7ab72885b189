// Oracle dump for the layers (checked by check_layers.py): each nn layer alone,
// under full<f32> (suffix ".f32") and autocast<bf16> (suffix ".bf16"): one
// value_and_grad step of loss = sum(out * r) (r random, out's dtype and shape)
// and a forward step of out, with every parameter's gradient, written to a bundle.
//   oracle_layers_dump <out.bundle>
// Under autocast<bf16> parameters are f32 and matmul operands/results bf16.
// Inputs that reach a layer as activations are params here too (so their
// gradient is checked): "x" has the dtype the layer sees in the model under the
// policy (see each case). The embedding's table under autocast is f32 end to
// end (identical to the f32 case), so its ".bf16" case uses full<bf16> instead,
// which exercises a bf16 table and a bf16 scatter-add of repeated ids.
#include <cstdint>
#include <string>
#include <vector>

#include "oracle.hpp"

namespace {

using ctg::i32;
using oracle::ranges;

// An i32 input with fixed values (ids, targets), recorded as "<case>/input/<leaf>".
template <class L>
struct fixed {
  std::vector<i32> data;
};

template <class L>
void record_fixed(oracle::dump& d, const std::string& name, const fixed<L>& in) {
  d.writer().add<i32>(name + "/input/" + L::name.c_str(), std::span<const i32>(in.data), oracle::static_dims<L>());
}

// oracle::grad_case with the parameters found from `out` (ctg::params_t) and
// fixed i32 inputs fed to both the gradient and the forward step.
template <class Out, class... Ls>
void layer_case(oracle::dump& d, const std::string& name, Out out, ranges rg, const fixed<Ls>&... in) {
  using R = oracle::r_like<Out>;
  using params = ctg::params_t<Out>;
  auto c = d.begin(name, std::move(rg));
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(out * R{}));
  auto st = ctg::make_store(dev, step);
  [&]<class... Ps>(ctg::tl::list<Ps...>) { (c.template param<Ps>(st), ...); }(params{});
  (record_fixed(d, name, in), ...);
  const auto r = c.template input<R>();
  step(st, ctg::feed<R>(r), ctg::feed<Ls>(in.data)...);
  c.loss(st);
  [&]<class... Ps>(ctg::tl::list<Ps...>) { (c.template grad<Ps>(st), ...); }(params{});

  auto fwd = ctg::forward(out);
  auto fs = ctg::make_store(dev, fwd);
  [&]<class... Ps>(ctg::tl::list<Ps...>) { (oracle::case_writer::copy_param<Ps>(st, fs), ...); }(params{});
  fwd(fs, ctg::feed<Ls>(in.data)...);
  c.value(fs.value(), oracle::static_dims<Out>());
}

// ids [3, 5] with repeats (the scatter-add of the gradient accumulates), over a vocab of 7.
const std::vector<i32> ids{3, 1, 3, 6, 0, 1, 1, 5, 3, 2, 6, 6, 0, 3, 1};
// targets [2, 5] over 7 classes, repeated values, two ignored (-100).
const std::vector<i32> targets{4, 0, -100, 4, 6, 2, 2, 5, -100, 0};

// P: the layers' policy; A: the activation dtype a matmul produces under P (f32 or bf16);
// S: the stats dtype (f32). Parameters are P::param_type (f32 under both policies).
template <class P>
void cases(oracle::dump& d, const std::string& tag) {
  namespace nn = ctg::nn;
  using A = typename P::matmul_type;
  using S = typename P::stats_type;
  auto name = [&](const char* base) { return std::string(base) + "." + tag; };

  {  // linear without bias, input x in the matmul dtype (as o @ wo, or (silu * up) @ w2)
    using X = ctg::param<"x", A, 2, 3, 6>;
    layer_case(d, name("linear"), nn::linear<"lin", 5, P>(X{}), {});
  }
  {  // linear with bias, input x in the stats dtype (as a norm's output)
    using X = ctg::param<"x", S, 2, 3, 6>;
    layer_case(d, name("linear_bias"), nn::linear<"lin", 5, P, nn::bias::with>(X{}), {});
  }
  {  // rms_norm / layer_norm of an x in the matmul dtype (bf16 under autocast: cast to f32 first)
    using X = ctg::param<"x", A, 3, 4, 8>;
    layer_case(d, name("rms_norm"), nn::rms_norm<"norm", P>(X{}), ranges{{"x", {-2, 2}}, {"norm.scale", {0.5, 1.5}}});
    layer_case(d, name("layer_norm"), nn::layer_norm<"norm", P>(X{}),
               ranges{{"x", {-2, 2}}, {"norm.scale", {0.5, 1.5}}, {"norm.bias", {-0.5, 0.5}}});
  }
  {  // SwiGLU MLP of a norm's output
    using X = ctg::param<"x", S, 2, 4, 6>;
    layer_case(d, name("swiglu"), nn::swiglu<"mlp", 10, P>(X{}), ranges{{"x", {-2, 2}}});
  }
  {  // causal self-attention, 2 heads of dim 4 over d = 8, T = 5, of a norm's output; the
     // ranges keep the logits |q.k|/sqrt(4) <= 1 (the softmax's conditioning: see tolerances.py)
    using X = ctg::param<"x", S, 2, 5, 8>;
    const oracle::range w{-0.5, 0.5};
    layer_case(d, name("attention"), nn::causal_self_attention<"attn", 2, 4, P>(X{}),
               ranges{{"attn.wq", w}, {"attn.wk", w}, {"attn.wv", w}, {"attn.wo", w}});
    // the same layer with its heads by ctg::causal_attention (attention_kernel::fused)
    layer_case(d, name("attention_fused"),
               nn::causal_self_attention<"attn", 2, 4, P, ctg::checkpointing::none, nn::attention_kernel::fused>(X{}),
               ranges{{"attn.wq", w}, {"attn.wk", w}, {"attn.wv", w}, {"attn.wo", w}});
  }
  {  // cross-entropy of logits [2, 5, 7] (the dtype lm_head produces) with ignored targets
    using L = ctg::param<"logits", A, 2, 5, 7>;
    using Tg = ctg::input<"targets", i32, 2, 5>;
    const std::string n = name("cross_entropy");
    auto c = d.begin(n, ranges{{"logits", {-3, 3}}});
    ctg::cpu::device dev;
    auto step = ctg::value_and_grad(nn::cross_entropy<-100>(L{}, Tg{}), ctg::wrt<L>);
    auto st = ctg::make_store(dev, step);
    c.template param<L>(st);
    record_fixed(d, n, fixed<Tg>{targets});
    step(st, ctg::feed<Tg>(targets));
    c.loss(st);
    c.template grad<L>(st);
  }
}

template <class P>
void embedding_case(oracle::dump& d, const std::string& tag) {
  using Ids = ctg::input<"ids", i32, 3, 5>;
  layer_case(d, "embedding." + tag, ctg::nn::embedding<"emb", 7, 4, P>(Ids{}), {}, fixed<Ids>{ids});
}

}  // namespace

int main(int argc, char** argv) {
  return oracle::run(argc, argv, [](oracle::dump& d) {
    cases<ctg::precision::full<ctg::f32>>(d, "f32");
    cases<ctg::precision::autocast<ctg::bf16>>(d, "bf16");
    embedding_case<ctg::precision::full<ctg::f32>>(d, "f32");
    embedding_case<ctg::precision::full<ctg::bf16>>(d, "bf16");
  });
}
