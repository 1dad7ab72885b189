// Oracle dump for the core ops (checked by check_ops.py): every case builds a ctg
// graph, fills its leaves from a fixed seed, runs one value_and_grad step of
// loss = sum(out * r) and a forward step of out, and writes the bundle.
//   oracle_ops_dump <out.bundle>
// Each case exists in f32 and bf16 (suffix ".f32" / ".bf16"); the Python side
// computes the same formula in float64 from the same stored values.
#include <string>

#include "oracle.hpp"

namespace {

using oracle::grad_case;
using oracle::ranges;

template <class T>
void cases(oracle::dump& d, const std::string& tag) {
  auto name = [&](const char* base) { return std::string(base) + "." + tag; };

  {  // batched matmul, batch dims broadcast: [2,1,5,4] @ [3,4,6] -> [2,3,5,6]
    using A = ctg::param<"a", T, 2, 1, 5, 4>;
    using B = ctg::param<"b", T, 3, 4, 6>;
    grad_case(d, name("matmul_bcast"), ctg::matmul(A{}, B{}), ctg::wrt<A, B>);
  }
  {  // x @ w^T with a rank-2 w broadcast over the batch (the linear-layer pattern)
    using A = ctg::param<"a", T, 2, 5, 4>;
    using B = ctg::param<"b", T, 6, 4>;
    grad_case(d, name("matmul_nt"), ctg::matmul(A{}, ctg::transpose(B{})), ctg::wrt<A, B>);
  }
  {  // transpose of the last two dims of a rank-3 tensor
    using X = ctg::param<"x", T, 2, 3, 4>;
    grad_case(d, name("transpose"), ctg::transpose(X{}), ctg::wrt<X>);
  }
  {  // softmax / log_softmax over the last axis
    using X = ctg::param<"x", T, 2, 3, 7>;
    grad_case(d, name("softmax"), ctg::softmax<-1>(X{}), ctg::wrt<X>, ranges{{"x", {-3, 3}}});
    grad_case(d, name("log_softmax"), ctg::log_softmax<-1>(X{}), ctg::wrt<X>, ranges{{"x", {-3, 3}}});
  }
  {  // RMSNorm written with ops; statistics in f32 (the casts vanish for f32)
    using X = ctg::param<"x", T, 4, 8>;
    using W = ctg::param<"w", T, 8>;
    auto xf = ctg::cast<ctg::f32>(X{});
    auto y = ctg::cast<T>(xf * ctg::rsqrt(ctg::mean<-1>(ctg::square(xf)) + ctg::lit<1e-5>)) * W{};
    grad_case(d, name("rms_norm"), y, ctg::wrt<X, W>, ranges{{"x", {-2, 2}}, {"w", {0.5, 1.5}}});
  }
  {  // layer norm written with ops; statistics in f32
    using X = ctg::param<"x", T, 4, 8>;
    using G = ctg::param<"g", T, 8>;
    using Bb = ctg::param<"b", T, 8>;
    auto xf = ctg::cast<ctg::f32>(X{});
    auto xc = xf - ctg::mean<-1>(xf);
    auto y = ctg::cast<T>(xc * ctg::rsqrt(ctg::mean<-1>(ctg::square(xc)) + ctg::lit<1e-5>)) * G{} + Bb{};
    grad_case(d, name("layer_norm"), y, ctg::wrt<X, G, Bb>, ranges{{"x", {-2, 2}}, {"g", {0.5, 1.5}}});
  }
  {  // activation chain: every path through gelu, silu, tanh, sigmoid
    using X = ctg::param<"x", T, 4, 8>;
    using W = ctg::param<"w", T, 8>;
    auto y = ctg::sigmoid(X{}) * ctg::tanh(ctg::silu(ctg::gelu(X{}) * W{}));
    grad_case(d, name("activations"), y, ctg::wrt<X, W>, ranges{{"x", {-3, 3}}, {"w", {-1.5, 1.5}}});
  }
  {  // the other unary ops (p > 0 for sqrt, log, rsqrt)
    using P = ctg::param<"p", T, 4, 6>;
    using Q = ctg::param<"q", T, 4, 6>;
    auto y = ctg::sqrt(P{}) * ctg::log(P{}) + ctg::exp(Q{}) * ctg::rsqrt(P{}) + ctg::abs(Q{}) * ctg::square(Q{}) +
             ctg::relu(Q{}) - Q{};
    grad_case(d, name("unary_misc"), y, ctg::wrt<P, Q>, ranges{{"p", {0.5, 2}}});
  }
  {  // reductions over one axis (middle, last, first), keeping it
    using X = ctg::param<"x", T, 3, 4, 5>;
    grad_case(d, name("sum_axis"), ctg::sum<1>(X{}), ctg::wrt<X>);
    grad_case(d, name("mean_axis"), ctg::mean<-1>(X{}), ctg::wrt<X>);
    grad_case(d, name("max_axis"), ctg::max<0>(X{}), ctg::wrt<X>);
  }
  {  // whole-tensor reductions (scalars broadcast back)
    using X = ctg::param<"x", T, 3, 4>;
    using Y = ctg::param<"y", T, 3, 4>;
    auto y = X{} * ctg::sum(Y{}) + Y{} * ctg::mean(X{}) + ctg::max(X{});
    grad_case(d, name("reduce_whole"), y, ctg::wrt<X, Y>);
  }
  {  // broadcasting add / mul / div with [D] and [1,D] operands
    using X = ctg::param<"x", T, 4, 6>;
    using B = ctg::param<"b", T, 6>;
    using S = ctg::param<"s", T, 1, 6>;
    using D = ctg::param<"d", T, 6>;
    auto y = (X{} + B{}) * S{} / D{} + B{} / (S{} + X{} * X{} + ctg::lit<1.0>);
    grad_case(d, name("bcast_arith"), y, ctg::wrt<X, B, S, D>, ranges{{"s", {0.5, 2}}, {"d", {0.5, 2}}});
  }
  {  // an input with a run-time batch dim, fed; broadcasting against it
    using U = ctg::input<"u", T, ctg::dyn, 6>;
    using R = ctg::input<"r", T, ctg::dyn, 6>;
    using B = ctg::param<"b", T, 6>;
    using S = ctg::param<"s", T, 1, 6>;
    constexpr std::int64_t batch = 5;
    auto out = (U{} - B{}) / S{} + U{} * B{};
    auto c = d.begin(name("bcast_dyn"), ranges{{"s", {0.5, 2}}});
    ctg::cpu::device dev;
    auto step = ctg::value_and_grad(ctg::sum(out * R{}), ctg::wrt<B, S>);
    auto st = ctg::make_store(dev, step);
    c.template param<B>(st);
    c.template param<S>(st);
    const auto u = c.template input<U>({batch, 6});
    const auto r = c.template input<R>({batch, 6});
    step(st, ctg::feed<U>(u, batch), ctg::feed<R>(r, batch));
    c.loss(st);
    c.template grad<B>(st);
    c.template grad<S>(st);
    auto fwd = ctg::forward(out);
    auto fs = ctg::make_store(dev, fwd);
    oracle::case_writer::copy_param<B>(st, fs);
    oracle::case_writer::copy_param<S>(st, fs);
    fwd(fs, ctg::feed<U>(u, batch));
    c.value(fs.value(), {batch, 6});
  }
}

}  // namespace

int main(int argc, char** argv) {
  return oracle::run(argc, argv, [](oracle::dump& d) {
    cases<ctg::f32>(d, "f32");
    cases<ctg::bf16>(d, "bf16");
    {  // autocast-style: f32 parameters, bf16 matmul, f32 result; gradients arrive in f32 through the casts
      using A = ctg::param<"a", ctg::f32, 5, 4>;
      using B = ctg::param<"b", ctg::f32, 4, 6>;
      auto y = ctg::cast<ctg::f32>(ctg::matmul(ctg::cast<ctg::bf16>(A{}), ctg::cast<ctg::bf16>(B{})));
      oracle::grad_case(d, "mixed_matmul.bf16", y, ctg::wrt<A, B>);
    }
  });
}
