// Compile-time queries on non-trivial graphs: dtype_t (promotion, casts, narrow
// reductions), shape_t (broadcasting, kept-axis reductions, matmul batch dims),
// requires_grad_v / has_grad_path_v / params_t, and the seed bugs that the type
// system must rule out (B1 frozen weight through a cast, B2 cast keeps grad-ness,
// B5 no_grad is part of the type). Everything here is a static_assert; the test
// case at the end only makes the executable report something.
#include <doctest/doctest.h>

#include <type_traits>

#include <ctg/ctg.hpp>

namespace {

using ctg::bf16;
using ctg::dyn;
using ctg::f16;
using ctg::f32;
using ctg::f64;
using ctg::shape;
using ctg::dtype_t;
using ctg::shape_t;
using ctg::requires_grad_v;
using ctg::has_grad_path_v;
using ctg::params_t;
namespace tl = ctg::tl;

template <class A, class B>
inline constexpr bool same = std::is_same_v<A, B>;

using W32 = ctg::param<"w32", f32, 3, 4>;
using Wb = ctg::param<"wb", bf16, 3, 4>;
using Wh = ctg::param<"wh", f16, 3, 4>;
using W64 = ctg::param<"w64", f64, 3, 4>;
using Bias = ctg::param<"bias", f32, 4>;
using Col = ctg::param<"col", f32, 3, 1>;
using Fz = ctg::frozen<"fz", f32, 3, 4>;
using Emb = ctg::frozen<"embed", bf16, 16, 4>;
using X = ctg::input<"x", bf16, dyn, 4>;
using Xf = ctg::input<"xf", f32, dyn, 4>;
using W1 = ctg::param<"mlp.w1", f32, 4, 8>;
using W2 = ctg::param<"mlp.w2", f32, 8, 4>;

// ------------------------------------------------------------------ leaves ---
static_assert(ctg::expr<W32> && ctg::expr<Fz> && ctg::expr<X>);
static_assert(requires_grad_v<W32> && !requires_grad_v<Fz> && !requires_grad_v<X>);
static_assert(same<dtype_t<Wb>, bf16> && same<shape_t<X>, shape<dyn, 4>>);
static_assert(same<shape_t<ctg::param<"s", f64>>, shape<>>);

// ------------------------------------------------------- dtype promotion ---
static_assert(same<dtype_t<decltype(Wb{} + W32{})>, f32>);  // bf16 + f32 = f32
static_assert(same<dtype_t<decltype(W32{} * Wb{})>, f32>);  // either order
static_assert(same<dtype_t<decltype(Wb{} + Wh{})>, f32>);   // bf16 + f16 = f32 (neither holds the other)
static_assert(same<dtype_t<decltype(Wh{} - Wb{})>, f32>);
static_assert(same<dtype_t<decltype(Wb{} / Wb{})>, bf16>);  // same narrow type stays narrow
static_assert(same<dtype_t<decltype(Wh{} * Wh{})>, f16>);
static_assert(same<dtype_t<decltype(W64{} + W32{})>, f64>);  // f64 is the widest
static_assert(same<dtype_t<decltype(Wb{} * W64{})>, f64>);
static_assert(same<dtype_t<decltype(Wb{} * ctg::lit<2.0>)>, bf16>);  // a literal takes the other side's dtype
static_assert(same<dtype_t<decltype(ctg::lit<0.5> - Wh{})>, f16>);
// An integer literal is the same literal (lit<2> did not compile: int to double
// is no converted constant expression).
static_assert(same<decltype(Wb{} * ctg::lit<2>), decltype(Wb{} * ctg::lit<2.0>)>);
static_assert(same<dtype_t<decltype(X{} + Bias{})>, f32>);  // bf16 input + f32 bias
// unary ops keep the dtype
static_assert(same<dtype_t<decltype(ctg::exp(Wb{}))>, bf16> && same<dtype_t<decltype(ctg::gelu(Wh{}))>, f16>);
static_assert(same<dtype_t<decltype(-ctg::rsqrt(ctg::abs(Wb{})))>, bf16>);
static_assert(same<dtype_t<decltype(ctg::transpose(Wb{}))>, bf16>);
// narrow reductions stay narrow (they accumulate in f32 but store bf16 / f16)
static_assert(same<dtype_t<decltype(ctg::sum<0>(Wb{}))>, bf16>);
static_assert(same<dtype_t<decltype(ctg::mean(Wb{}))>, bf16>);
static_assert(same<dtype_t<decltype(ctg::max<-1>(Wh{}))>, f16>);
static_assert(same<dtype_t<decltype(ctg::amax(Wb{}))>, bf16>);
static_assert(same<dtype_t<decltype(ctg::softmax(Wb{}))>, bf16>);
static_assert(same<dtype_t<decltype(ctg::log_softmax<0>(Wh{}))>, f16>);
// matmul gives the wider operand dtype
static_assert(same<dtype_t<decltype(ctg::matmul(X{}, ctg::cast<bf16>(W1{})))>, bf16>);
static_assert(same<dtype_t<decltype(ctg::matmul(X{}, W1{}))>, f32>);
static_assert(same<dtype_t<decltype(ctg::matmul(ctg::transpose(Wh{}), Wb{}))>, f32>);
// cast gives its target; a cast to the same dtype is the node itself
static_assert(same<dtype_t<decltype(ctg::cast<bf16>(W32{}))>, bf16>);
static_assert(same<dtype_t<decltype(ctg::cast<f32>(ctg::cast<f16>(ctg::cast<bf16>(W64{}))))>, f32>);
static_assert(same<decltype(ctg::cast<f32>(W32{})), W32>);
static_assert(same<dtype_t<decltype(ctg::cast<f32>(ctg::sum(Wb{})) + ctg::mean(W32{}))>, f32>);
// no_grad and broadcast_to keep the dtype
static_assert(same<dtype_t<decltype(ctg::no_grad(Wb{}))>, bf16>);
static_assert(same<dtype_t<decltype(ctg::broadcast_to<shape<2, 3, 4>>(Wh{}))>, f16>);

// ---------------------------------------------------------- broadcasting ---
static_assert(same<shape_t<decltype(W32{} + Bias{})>, shape<3, 4>>);  // [M,N] + [N]
static_assert(same<shape_t<decltype(Bias{} + W32{})>, shape<3, 4>>);  // [N] + [M,N]
static_assert(same<shape_t<decltype(Col{} * W32{})>, shape<3, 4>>);   // [M,1] * [M,N]
static_assert(same<shape_t<decltype(Col{} * Bias{})>, shape<3, 4>>);  // [M,1] * [N]: outer product
static_assert(same<shape_t<decltype(ctg::param<"t", f32, 2, 1, 4>{} + Col{})>, shape<2, 3, 4>>);
static_assert(same<shape_t<decltype(ctg::param<"s", f32>{} * W32{})>, shape<3, 4>>);  // rank-0 leaf
static_assert(same<shape_t<decltype(W32{} * ctg::lit<3.0>)>, shape<3, 4>>);           // literal
static_assert(same<shape_t<decltype(X{} + Bias{})>, shape<dyn, 4>>);                    // dyn rows stay dyn
static_assert(same<shape_t<decltype(Xf{} * ctg::param<"r", f32, 1, 4>{})>, shape<dyn, 4>>);
static_assert(same<shape_t<decltype(Xf{} + W32{})>, shape<3, 4>>);  // dyn vs static: the static dim (checked at run time)
static_assert(same<shape_t<decltype(ctg::broadcast_to<shape<2, 3, 4>>(Col{}))>, shape<2, 3, 4>>);

// ------------------------------------------------ kept-axis reductions ---
using T234 = ctg::param<"t234", f32, 2, 3, 4>;
static_assert(same<shape_t<decltype(ctg::sum<0>(W32{}))>, shape<1, 4>>);
static_assert(same<shape_t<decltype(ctg::sum<1>(W32{}))>, shape<3, 1>>);
static_assert(same<shape_t<decltype(ctg::sum<-1>(W32{}))>, shape<3, 1>>);
static_assert(same<shape_t<decltype(ctg::mean<-2>(W32{}))>, shape<1, 4>>);
static_assert(same<shape_t<decltype(ctg::max<1>(T234{}))>, shape<2, 1, 4>>);
static_assert(same<shape_t<decltype(ctg::sum<-3>(T234{}))>, shape<1, 3, 4>>);
static_assert(same<shape_t<decltype(ctg::sum(T234{}))>, shape<>>);
static_assert(same<shape_t<decltype(ctg::mean(X{}))>, shape<>>);
static_assert(same<shape_t<decltype(ctg::amax(T234{}))>, shape<>>);
static_assert(same<shape_t<decltype(ctg::mean<0>(X{}))>, shape<1, 4>>);     // the dyn axis reduced to 1
static_assert(same<shape_t<decltype(ctg::max<-1>(X{}))>, shape<dyn, 1>>);   // the dyn axis kept
static_assert(same<shape_t<decltype(ctg::softmax<1>(T234{}))>, shape<2, 3, 4>>);
static_assert(same<shape_t<decltype(W32{} - ctg::mean<-1>(W32{}))>, shape<3, 4>>);  // kept axis broadcasts back
// the default softmax axis is the last one
static_assert(same<decltype(ctg::softmax(T234{})), decltype(ctg::softmax<-1>(T234{}))>);
static_assert(same<decltype(ctg::softmax(T234{})), decltype(ctg::softmax<2>(T234{}))>);
static_assert(same<decltype(ctg::log_softmax(T234{})), decltype(ctg::log_softmax<2>(T234{}))>);
static_assert(same<decltype(ctg::softmax<-2>(T234{})), decltype(ctg::softmax<1>(T234{}))>);

// ----------------------------------------------------- matmul / transpose ---
static_assert(same<shape_t<decltype(ctg::matmul(W32{}, W1{}))>, shape<3, 8>>);
static_assert(same<shape_t<decltype(ctg::matmul(T234{}, W1{}))>, shape<2, 3, 8>>);  // [B,M,K]@[K,N]
static_assert(same<shape_t<decltype(ctg::matmul(T234{}, ctg::param<"b", f32, 2, 4, 5>{}))>, shape<2, 3, 5>>);
static_assert(same<shape_t<decltype(ctg::matmul(W32{}, ctg::param<"b", f32, 2, 4, 5>{}))>, shape<2, 3, 5>>);
static_assert(same<shape_t<decltype(ctg::matmul(ctg::param<"a", f32, 2, 1, 3, 4>{}, ctg::param<"b", f32, 5, 4, 6>{}))>,
                   shape<2, 5, 3, 6>>);  // batch dims broadcast
static_assert(same<shape_t<decltype(ctg::matmul(X{}, W1{}))>, shape<dyn, 8>>);
static_assert(same<shape_t<decltype(ctg::matmul(ctg::transpose(X{}), X{}))>, shape<4, 4>>);  // dyn K
static_assert(same<shape_t<decltype(ctg::transpose(T234{}))>, shape<2, 4, 3>>);
static_assert(same<shape_t<decltype(ctg::transpose(X{}))>, shape<4, dyn>>);

// ------------------------------------------------------ requires_grad_v ---
static_assert(requires_grad_v<decltype(W32{} * Xf{})>);
static_assert(!requires_grad_v<decltype(Fz{} * Xf{})>);
static_assert(!requires_grad_v<decltype(ctg::exp(Xf{}) + Fz{})>);
static_assert(requires_grad_v<decltype(ctg::matmul(X{}, W1{}))>);
static_assert(!requires_grad_v<decltype(ctg::matmul(X{}, ctg::transpose(ctg::cast<f32>(Emb{} + Emb{}))))>);
static_assert(requires_grad_v<decltype(ctg::max<0>(W32{}))> && requires_grad_v<decltype(ctg::amax(Wb{}))>);
static_assert(requires_grad_v<decltype(ctg::relu(Wb{}))> && requires_grad_v<decltype(ctg::abs(W32{}))>);
static_assert(requires_grad_v<decltype(ctg::softmax(W32{}))>);
static_assert(requires_grad_v<decltype(ctg::broadcast_to<shape<2, 3, 4>>(W32{}))>);
static_assert(requires_grad_v<decltype(ctg::transpose(W32{}))>);
static_assert(!requires_grad_v<decltype(ctg::no_grad(W32{}))>);
static_assert(!requires_grad_v<decltype(ctg::no_grad(W32{}) * Xf{} + Fz{})>);
static_assert(requires_grad_v<decltype(ctg::no_grad(W32{}) + W32{})>);
static_assert(!requires_grad_v<decltype(ctg::lit<2.0> * Fz{})>);

// --------------------------------------------------------- the README model ---
template <class In>
auto mlp(In x) {
  auto h = ctg::matmul(x, ctg::cast<bf16>(W1{}));
  return ctg::matmul(ctg::silu(h), ctg::cast<bf16>(W2{}));
}
using Loss = decltype(ctg::mean(ctg::square(ctg::cast<f32>(mlp(X{})))));
static_assert(requires_grad_v<Loss>);
static_assert(has_grad_path_v<Loss, W1> && has_grad_path_v<Loss, W2>);
static_assert(same<dtype_t<Loss>, f32> && same<shape_t<Loss>, shape<>>);
static_assert(same<dtype_t<decltype(mlp(X{}))>, bf16> && same<shape_t<decltype(mlp(X{}))>, shape<dyn, 4>>);
static_assert(same<params_t<Loss>, tl::list<W1, W2>>);
static_assert(!has_grad_path_v<Loss, X>);        // inputs never
static_assert(!has_grad_path_v<Loss, W32>);      // not in the graph at all
// value_and_grad(loss) differentiates with respect to params_t<loss>
static_assert(same<typename decltype(ctg::value_and_grad(Loss{}))::wrt, tl::list<W1, W2>>);

// -------------------------------------------------------------- params_t ---
// Trainable leaves with a grad path, each once, children before parents (topological).
using P = decltype(ctg::sum(W32{} * Bias{} + W32{} * Fz{}) + ctg::sum(ctg::no_grad(Col{}) * W32{}));
static_assert(same<params_t<P>, tl::list<W32, Bias>>);  // Fz frozen, Col only under no_grad
static_assert(same<params_t<decltype(ctg::sum(Xf{} * Fz{}))>, tl::list<>>);
static_assert(same<params_t<decltype(ctg::sum(Bias{} + W32{}))>, tl::list<Bias, W32>>);
static_assert(same<params_t<decltype(ctg::sum(W32{} + Bias{}))>, tl::list<W32, Bias>>);
static_assert(has_grad_path_v<P, W32> && has_grad_path_v<P, Bias> && !has_grad_path_v<P, Col>);
static_assert(!has_grad_path_v<P, Fz>);

// ------------------------------------------------ B2: cast keeps grad-ness ---
// x.to(float32) inside an RMSNorm must not drop requires-grad.
static_assert(requires_grad_v<decltype(ctg::cast<f32>(ctg::cast<bf16>(W32{})))>);
static_assert(requires_grad_v<decltype(ctg::cast<f32>(Wb{}))>);
static_assert(requires_grad_v<decltype(ctg::cast<bf16>(ctg::cast<f16>(ctg::cast<f64>(Wb{}))))>);
template <class In>
auto rmsnorm_f32(In x) {
  auto xf = ctg::cast<f32>(x);
  return ctg::cast<bf16>(xf * ctg::rsqrt(ctg::mean<-1>(ctg::square(xf)) + ctg::lit<1e-6>));
}
static_assert(requires_grad_v<decltype(rmsnorm_f32(ctg::matmul(X{}, ctg::cast<bf16>(W1{}))))>);
static_assert(has_grad_path_v<decltype(ctg::sum(rmsnorm_f32(ctg::matmul(X{}, ctg::cast<bf16>(W1{}))))), W1>);
static_assert(!requires_grad_v<decltype(rmsnorm_f32(X{}))>);  // inputs only: correctly no grad
static_assert(same<dtype_t<decltype(rmsnorm_f32(X{}))>, bf16>);

// ------------------------------------ B5: no_grad is part of the type ---
using Wc = decltype(ctg::cast<bf16>(W1{}));           // the "cached" low-precision weight
using Wc_ng = decltype(ctg::no_grad(ctg::cast<bf16>(W1{})));  // the same cast made under no_grad
static_assert(!same<Wc, Wc_ng>);
static_assert(!same<decltype(ctg::matmul(X{}, Wc{})), decltype(ctg::matmul(X{}, Wc_ng{}))>);
static_assert(!same<decltype(ctg::no_grad(W32{}) * Xf{}), decltype(W32{} * Xf{})>);
static_assert(!has_grad_path_v<decltype(ctg::no_grad(W32{}) * Xf{}), W32>);
static_assert(has_grad_path_v<decltype(W32{} * Xf{}), W32>);
// A no-grad forward and a grad forward in one graph: the grad one still reaches W1.
using Mixed = decltype(ctg::sum(ctg::cast<f32>(ctg::matmul(X{}, Wc_ng{}))) + ctg::sum(ctg::cast<f32>(ctg::matmul(X{}, Wc{}))));
static_assert(has_grad_path_v<Mixed, W1> && same<params_t<Mixed>, tl::list<W1>>);
// ... and a graph that only has the no-grad copy does not.
using OnlyNoGrad = decltype(ctg::sum(ctg::cast<f32>(ctg::matmul(X{}, Wc_ng{}))) + ctg::sum(W32{}));
static_assert(!has_grad_path_v<OnlyNoGrad, W1> && same<params_t<OnlyNoGrad>, tl::list<W32>>);
// identical expressions are one node (common subexpressions merge)
static_assert(same<decltype(ctg::exp(ctg::cast<bf16>(W1{}))), decltype(ctg::exp(Wc{}))>);

// -------------------------------- B1: a frozen leaf through a cast stays frozen ---
using EmbCast = decltype(ctg::cast<f32>(ctg::cast<bf16>(ctg::cast<f32>(Emb{}))));
static_assert(!requires_grad_v<EmbCast>);
using B1Loss = decltype(ctg::sum(ctg::matmul(ctg::cast<f32>(X{}), ctg::transpose(EmbCast{})) ) +
                        ctg::sum(ctg::matmul(Xf{}, ctg::cast<f32>(ctg::cast<bf16>(W1{})))));
static_assert(!has_grad_path_v<B1Loss, Emb>);
static_assert(has_grad_path_v<B1Loss, W1>);
static_assert(same<params_t<B1Loss>, tl::list<W1>>);
static_assert(requires_grad_v<B1Loss>);

// ----------------------------------------------------------- schedules ---
// Fused as the design says: a softmax, a norm, an elementwise chain ending in one
// reduction, and a matmul are one group each in a forward step.
static_assert(ctg::group_count_v<decltype(ctg::forward(ctg::softmax(W32{})))> == 1);
static_assert(ctg::group_count_v<decltype(ctg::forward(ctg::log_softmax(W32{})))> == 1);
static_assert(ctg::group_count_v<decltype(ctg::forward(rmsnorm_f32(Wb{})))> == 1);
static_assert(ctg::group_count_v<decltype(ctg::forward(ctg::sum(ctg::exp(ctg::tanh(W32{}) * W32{}))))> == 1);
static_assert(ctg::group_count_v<decltype(ctg::forward(ctg::matmul(Xf{}, W1{})))> == 1);

// ------------------------------------------------------------- vertices ---
// A node with children is a node_ref named by a hash of its definition's
// printed name: equal expressions are one vertex, and expressions that differ
// in anything (an operand, an op, a constant in its last bit, a dropout name
// or probability) are different vertices.
static_assert(std::is_same_v<decltype(ctg::exp(W32{}) * Xf{}), decltype(ctg::exp(W32{}) * Xf{})>);
static_assert(!std::is_same_v<decltype(ctg::exp(W32{}) * Xf{}), decltype(Xf{} * ctg::exp(W32{}))>);
static_assert(!std::is_same_v<decltype(W32{} * ctg::lit<0.1>), decltype(W32{} * ctg::lit<0.10000000000000002>)>);
static_assert(!std::is_same_v<decltype(ctg::dropout<"a">(W32{}, ctg::lit<0.1>)),
                              decltype(ctg::dropout<"b">(W32{}, ctg::lit<0.1>))>);
static_assert(!std::is_same_v<decltype(ctg::dropout<"a">(W32{}, ctg::lit<0.1>)),
                              decltype(ctg::dropout<"a">(W32{}, ctg::lit<0.2>))>);
// Deep sharing stays cheap: 40 residual steps are 40 vertices deep, each a name of constant size.
template <int N, class X>
constexpr auto residuals(X x) {
  if constexpr (N == 0) return x;
  else return residuals<N - 1>(x + ctg::tanh(x));
}
static_assert(std::is_same_v<ctg::dtype_t<decltype(residuals<40>(W32{}))>, f32>);

}  // namespace

TEST_CASE("graph_static: the compile-time queries above were checked by the compiler") {
  // The real checks are the static_asserts of this file; this keeps the executable honest
  // about running and shows the queries are usable at run time too.
  CHECK(requires_grad_v<decltype(ctg::cast<f32>(ctg::cast<bf16>(W32{})))>);
  CHECK_FALSE(has_grad_path_v<decltype(ctg::no_grad(W32{}) * Xf{}), W32>);
  CHECK(params_t<Loss>::size == 2);
  CHECK(params_t<B1Loss>::size == 1);
}
