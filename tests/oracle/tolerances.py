"""The oracle's tolerances: the one place they are stated (see oracle.py for how they are used).

A value computed by ctg (`got`) passes against the float64 PyTorch reference (`ref`) when

    |got - ref| <= rtol * |ref| + floor * scale

where `scale` is the magnitude the value was computed from:
  * for a tensor (a gradient, a forward value): max |ref| over that tensor;
  * for the loss sum(out * r): sum |out * r|, the magnitudes of the terms it adds
    (a sum's rounding error is bounded by its terms, not by the sum, which may cancel).
The floor covers values that are small only because of cancellation (a gradient
entry near zero, 1 - tanh(x)^2 for |tanh(x)| near 1): their error is set by the
magnitudes that cancelled, which `scale` stands for.

The reference is float64 PyTorch (autograd for gradients) on exactly the values
ctg stored (inputs and parameters are read back from the bundle), so what is
measured is ctg's own rounding error, not a difference of inputs.

f32 (unit roundoff u = 2^-24 ~ 6.0e-8)
    rtol 1e-5 (~170 u), floor 1e-6 (~17 u) of the tensor's scale.
    ctg computes f32 nodes in f32 and rounds once per node; reductions accumulate in
    f64, matmuls in f32 over K <= 8 terms; exp/log/tanh/erf are within a few ulp.
    The longest chain in these cases (forward and backward of the activation chain,
    the layer norm) is ~20 f32 operations, each adding at most u (first order) of
    the magnitudes involved: ~20 u, an order of magnitude inside rtol. The floor
    (17 u of the scale) covers entries that cancel to ~0 from terms of the
    tensor's size (e.g. softmax gradients s_i * (r_i - sum_j r_j s_j)).

bf16 (8 significant bits: one rounding is at most u = 2^-9 ~ 2.0e-3 relative)
    rtol = floor = 16 u = 2^-5 ~ 3.1e-2.
    ctg rounds every bf16 node's output once (arithmetic runs in f32, reductions
    accumulate in f64, matmuls in f32), so to first order a value's relative error
    is the sum of the roundings on its paths, each <= u, a rounded factor counting
    as often as it is used (r*r*r counts r's rounding 3 times). Roundings a
    compared value sees in the bf16 cases of check_ops.py (inputs are exact):
      * matmul, transpose, reductions, broadcasting arithmetic: 1-6
        (bcast_arith's grad/d: x+b, *s, /d forward, then g*self, /d and the sum
        over rows);
      * softmax / log_softmax: forward 3 (exp, sum, div), gradient 3-5 more;
      * rms_norm / layer_norm with f32 statistics: 2-3 bf16 roundings forward
        (the cast back to bf16, *w, +b), 2-3 in the gradient; the f32 middle adds ~0;
      * activations (gelu, *w, silu, tanh, sigmoid, product) and unary_misc are the
        longest: up to ~10 on the longest gradient path (unary_misc's grad/p through
        rsqrt: exp(q), g*exp(q), then *r three times, each r rounded, then the sum
        of the sqrt/log/rsqrt contributions);
      * mixed_matmul: the two f32 -> bf16 input casts (1 each) and the product: ~3.
    16 u bounds ~10 first-order roundings with room for the second-order terms and
    for the cancellation between contributions that the floor only partly absorbs.
    8 u (PyTorch's assert_close default for bf16, 1.6e-2) is not enough: PyTorch's
    own bf16 evaluation of unary_misc, from the same values, is 8.7 u off its f64
    result at grad/p (ctg: 4.6 u). The floor equals rtol because a bf16 value's
    error scales with the magnitudes it was computed from, which in these small
    cases (reductions add <= 7 terms) are within a small factor of the tensor's
    max |value|.
    A case family with more roundings on a path (deep stacks, long reductions)
    gets its own row here with its own count; loosening a row needs a new count,
    not a failing case.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    rtol: float   # relative to |ref| of the element
    floor: float  # relative to the scale of the tensor (see above)


U_F32 = 2.0 ** -24
U_BF16 = 2.0 ** -9

TOLERANCES = {
    "f32": Tolerance(rtol=1e-5, floor=1e-6),
    "bf16": Tolerance(rtol=16 * U_BF16, floor=16 * U_BF16),
}


def for_tag(tag):
    """The tolerance of a case tagged `<case>.<tag>` (tag: 'f32', 'bf16')."""
    if tag not in TOLERANCES:
        raise KeyError(f"no tolerance for dtype tag '{tag}' (known: {', '.join(TOLERANCES)})")
    return TOLERANCES[tag]
