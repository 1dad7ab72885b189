#pragma once
// cross_entropy(logits [..., V], targets [...] i32): the mean over the
// targets that are not Ignore of -log_softmax(logits)[target], in the stats
// type (f32 for narrow logits), fused with the log-softmax: forward keeps
// two values a row (the max, log(sum(exp))) and nothing of the logits' size;
// backward is one pass over the logits, writing their gradient.
// As PyTorch's F.cross_entropy(..., ignore_index=Ignore, reduction="mean"):
// when every target is ignored the loss is 0/0 (NaN) and the gradient is 0
// (an all-padding micro-batch adds nothing to an accumulated gradient). A
// target outside [0, classes) that is not Ignore is a run-time ctg::error.
#include <ctg/precision/policy.hpp>

namespace ctg::nn {

template <int Ignore = -100, expr Logits, expr Targets>
constexpr auto cross_entropy(Logits logits, Targets targets) {
  static_assert(index_type<typename Targets::dtype>, "ctg: cross_entropy targets must be an i32 tensor");
  static_assert(Logits::dims::rank == Targets::dims::rank + 1,
                "ctg: shape mismatch: cross_entropy wants logits [..., classes] and targets [...]");
  using S = std::conditional_t<std::is_same_v<typename Logits::dtype, f64>, f64, f32>;
  constexpr dim_t classes = Logits::dims::dims[Logits::dims::rank - 1];
  static_assert(classes != dyn, "ctg: cross_entropy needs a static number of classes");
  // (The target's log-probability selected, not multiplied by the one-hot:
  // a -inf logit elsewhere in the row, a masked class, gives 0 there, not
  // NaN. An ignored target's one-hot row is 0, so its row picks 0.)
  auto log_p = log_softmax(cast<S>(logits));
  auto hot = cast<S>(one_hot<classes, Ignore>(targets));
  auto picked = sum<-1>(detail::make_ew<op::keep_where, decltype(log_p), decltype(hot)>());
  auto total = sum(picked);
  auto count = sum(cast<S>(index_valid<Ignore>(unsqueeze<-1>(targets))));
  // An all-ignored batch: its NaN comes from a term of the targets alone
  // (0/count), which has no gradient; the mean is 0 there, and so are the
  // gradients, where total/count would make them 0 * (1/0).
  auto mean = detail::make_ew<op::div_by_count, decltype(total), decltype(count)>();
  return -mean + lit<0.0> / count;
}

}  // namespace ctg::nn
