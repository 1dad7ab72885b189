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

bf16 (8 significant bits: one rounding is at most u = 2^-8 ~ 3.9e-3 relative)
    rtol = floor = 2^-5 ~ 3.1e-2.
    NOTE: this paragraph was written with u = 2^-9, half of bf16's unit roundoff
    (2^-8: 7 stored + 1 implicit significant bits; 1 + 2^-8 is the midpoint of 1
    and the next bf16, 1 + 2^-7). Its "16 u" below are 8 true u, so the count of
    ~10 roundings it gives is not covered to first order; the row is unchanged
    here (same value, 2^-5) and left to the ops area to recount.
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

Rows of the layers, model and model_adamw areas (check_layers.py, check_model.py)
------------------------------------------------------------------------------
Reference: torch_nn.py, float64, with ctg's policy mirrored: nothing rounded for
full<f32>; under autocast<bf16> a bf16 rounding at exactly ctg's cast points, in
forward and in backward (the gradient reaching a bf16 tensor is bf16).

One rule turns a count into a tolerance. A compared value whose first-order error
is a sum of n rounding contributions, each at most U relative to the magnitudes it
was computed from, gets
    count_tolerance(n, U) = min(n, 6 sqrt(n)) U     (as rtol and as floor)
n U is the worst case. 6 sqrt(n) U is Hoeffding's bound for n independent,
mean-zero errors in [-U, U] (the standard probabilistic model of rounding errors,
Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019), exceeded with probability at
most 2 exp(-18) ~ 3e-8 per element; it is the smaller one for n > 36.

Counting against the mirror. ctg and the mirror round at the same points. A
rounding of identical inputs (an f32 parameter or a bf16 leaf cast to bf16) gives
identical results on both sides and counts 0; a rounding of a computed value
counts once on each side (n = n_ctg + n_mirror: |C - T| <= |C - E| + |T - E|
around the exact evaluation E of the rounded program). ctg has a few roundings
the mirror does not (the bf16 sum_to over the batch after a broadcast matmul's
weight gradient; silu's gradient as two bf16 nodes; each gradient contribution
cast before the sum); they count on ctg's side only. Values used by a product
bring their own counts (a factor computed with 3 roundings counts 3).
Conditioning is 1 per rounding on the data used, except where stated.

f32 rows: rtol 1e-5 (~170 U_F32, the requirement), floor count_tolerance(n, U_F32):
  layers  n = 40: attention's grad/x, the longest chain: ~11 rounded f32 nodes in
          forward (q, k, scores, the 1/sqrt(Dh) scale, max-subtract, exp, sum, div,
          @v, @wo), ~20 in backward, and the forward values the backward
          multiplies by. floor = 37.9 U_F32 = 2.3e-6 of the tensor's scale.
  model   n = 200: the deepest gradient (tok.weight) runs through the head and the
          loss (~15), two blocks forward (~27 each: rms_norm 6, the attention
          chain above, the residual adds, rms_norm, SwiGLU) and the same backward,
          plus the forward values used: 6 sqrt(200) = 84.9 U_F32 = 5.1e-6.
bf16 layer rows (autocast<bf16>; full<bf16> for the embedding), n = n_ctg + n_mirror
on the worst compared tensor:
  linear         6  linear_bias's loss: ctg x@W, +b, *r, sum (4); mirror x@W, +b (2)
  norm           2  grad/x: the f32 gradient cast to bf16 once on each side; the
                    values and grad/scale are f32 (no bf16 rounding at all)
  swiglu        15  grad/x: ctg r@W2^T, *h3 (and h3's own rounding), silu'(h1) and
                    h1's rounding, *silu', @W1^T, + the W3 branch (8); mirror 7
                    (silu's backward is one rounding)
  attention     30  grad/x: ctg 15 = wo@r^T (1); its product with v for probs'
                    gradient (3 with v); the f32 softmax backward
                    uses probs (6: q, k and the scores, each counted twice, the
                    softmax's relative condition 2 max|logit| <= 2 on this data)
                    and that gradient (3): 9; cast to bf16 (10); @k (12 with k);
                    @Wq (13); + the k and v paths (15). Mirror 15. The data (x in
                    [-1, 1], weights in [-0.5, 0.5]) keep max |q.k|/sqrt(Dh) <=
                    LAYER_ATTENTION_MAX_LOGIT = 1 (check_layers.py checks it).
  embedding      2  full<bf16>: the scatter-add accumulates in f32 and rounds once
                    (ctg) / once (mirror); the loss: ctg rounds out*r and the sum
  cross_entropy  2  grad/logits: the f32 gradient cast to bf16 once on each side
bf16 model row: not countable by hand to a useful bound. Softmax attention with
  logits up to |z| = 2.8 (this model at init std 0.2, measured) multiplies the
  relative error of its input by up to ~1 + 4 max|z| ~ 12 in the worst case, per
  block, so the worst-case first-order count for a gradient through two blocks is
  well over 100 % and even the Hoeffding form is ~50 % (rough estimates). The count is done by simulation
  instead: torch_nn.MonteCarlo evaluates the mirror's program with every bf16
  rounding of a computed value (forward and backward) replaced by an independent
  relative error d ~ U(-U, U), inputs rounded exactly; `samples` evaluations give
  each compared element's rounding-noise standard deviation s (conditioning
  included, and the roundings counted one by one). ctg and the mirror are two such
  evaluations, so their difference has standard deviation <= sqrt(2) s; allowed:
      6 sqrt(2) s + the f32 model row (ctg computes between its bf16 roundings in f32)
  6 standard deviations: 2e-9 per element for a normal tail; s is estimated from
  256 samples (relative standard error 4.4 %). Slight undercount: ctg's few extra
  roundings (above) are not simulated; the simulation also rounds every narrow
  tensor's summed gradient, which over-counts single-consumer tensors.

model_adamw (3 steps of AdamW, lr 1e-2, weight decay 0.1, clipping at norm 1)
  Adam divides m by sqrt(v): one step moves an element by about lr * sign(g)
  whatever |g| is, so an error in a gradient that is tiny compared with its own
  tolerance can flip a whole step (2 lr), while a well-determined gradient's error
  barely matters. A single rtol on parameters is therefore either wrong for the
  first kind or meaningless for the second. AdamWTolerance bounds each element:
    1. per step t, the gradient ctg used is within a_t of torch's gradient at the
       same parameters, ctg's after step t-1 (the gradient row: f32 rtol/floor,
       bf16 the simulated 6 sqrt(2) s of the training runs; 0 for structural
       zeros, exactly 0 in torch and in every simulated run: the embedding rows
       of tokens that never occur), which check_model.py CHECKS; so it is within
       d_t = a_t + |torch's gradient at ctg's parameters - at its own| of torch's
       run's gradient, and the rest is a consequence, not a hope;
    2. the global norm is then within ||d_t||, the clip coefficient within the
       matching interval, each clipped gradient in an interval, m_t and v_t (sums
       of those and of their squares) in intervals, and the Adam direction
       m_hat / (sqrt(v_hat) + eps) in an interval, clamped to |.| <= B_t (the
       Cauchy-Schwarz bound on |m_hat| / sqrt(v_hat), ~1.00 for t <= 3);
    3. both parameters follow p_t = p_(t-1) (1 - lr wd) - lr dir_t, so
       |dp_t| <= |dp_(t-1)| (1 - lr wd) + lr width(dir_t) + 4 U_F32 (|p_t| + lr B_t)
       (the last term: both sides' f32 update arithmetic, ~1 ulp per operation).
  An element whose gradient interval contains 0 at some step gets width 2 B_t:
  ctg and torch may legitimately step in opposite directions there (under
  autocast<bf16> ~700 of the 4480 elements at step 1, and 3 of them do: |dp| = 2 lr,
  err/allowed 0.999); elsewhere the bound is tight.
  The loss at step t is allowed the loss row plus sum |g_t| |dp_(t-1)| (first order
  in the parameter difference), the gradient norm ||d_t||.
"""
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    rtol: float   # relative to |ref| of the element
    floor: float  # relative to the scale of the tensor (see above)

    def allowed(self, ref, scale):
        """Elementwise allowed |got - ref| (ref: a float64 tensor)."""
        return self.rtol * ref.abs() + self.floor * scale


U_F32 = 2.0 ** -24  # unit roundoff: 24 significant bits
U_BF16 = 2.0 ** -8  # unit roundoff: 8 significant bits (see the NOTE above)

TOLERANCES = {
    "f32": Tolerance(rtol=1e-5, floor=1e-6),
    "bf16": Tolerance(rtol=2.0 ** -5, floor=2.0 ** -5),  # = 8 U_BF16; see the NOTE above
}

# Rows of a family of cases (an area's check names the family: Cases.formula(base,
# tolerances=family)); a family states every tag it uses.
FAMILIES = {}


def for_tag(tag, family=None):
    """The tolerance of a case tagged `<case>.<tag>` (tag: 'f32', 'bf16'), in `family` if given."""
    rows = TOLERANCES if family is None else FAMILIES.get(family)
    if rows is None:
        raise KeyError(f"no tolerance family '{family}' (known: {', '.join(FAMILIES)})")
    if tag not in rows:
        raise KeyError(f"no tolerance for dtype tag '{tag}'{'' if family is None else f' in family {family}'} "
                       f"(known: {', '.join(rows)})")
    return rows[tag]


def count_tolerance(n, u):
    """min(n, 6 sqrt(n)) u: n first-order roundings of at most u each (see above)."""
    return min(n, 6.0 * math.sqrt(n)) * u


def counted(n, u):
    t = count_tolerance(n, u)
    return Tolerance(rtol=t, floor=t)


# ---- layers (check_layers.py): one family per layer --------------------------
F32_LAYERS = Tolerance(rtol=1e-5, floor=count_tolerance(40, U_F32))
BF16_LAYER_COUNTS = {"linear": 6, "norm": 2, "swiglu": 15, "attention": 30, "embedding": 2, "cross_entropy": 2}
LAYER_ATTENTION_MAX_LOGIT = 1.0  # the attention count assumes this; check_layers.py checks it
for _layer, _n in BF16_LAYER_COUNTS.items():
    FAMILIES["layers." + _layer] = {"f32": F32_LAYERS, "bf16": counted(_n, U_BF16)}


# ---- model (check_model.py) ---------------------------------------------------
@dataclass(frozen=True)
class MonteCarloTolerance:
    """allowed = base + lam * sqrt(2) * s, s: the standard deviation of the value over
    `samples` simulated bf16 evaluations (torch_nn.MonteCarlo; see above)."""
    base: Tolerance
    samples: int = 256
    lam: float = 6.0

    def allowed(self, ref, scale, spread):
        return self.base.allowed(ref, scale) + self.lam * math.sqrt(2.0) * spread


F32_MODEL = Tolerance(rtol=1e-5, floor=count_tolerance(200, U_F32))
FAMILIES["model"] = {"f32": F32_MODEL, "bf16": MonteCarloTolerance(base=F32_MODEL)}


@dataclass(frozen=True)
class AdamWTolerance:
    """Per-element bounds on parameters after AdamW steps (see above), given per-step
    bounds on the gradients. `grad` is the gradient row: a Tolerance, or a
    MonteCarloTolerance whose spread comes from simulated training runs."""
    grad: object
    lr: float = 1e-2
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0
    ulps: float = 4.0

    def direction_bound(self, t):
        """B_t >= |m_hat_t| / sqrt(v_hat_t) for any gradients (Cauchy-Schwarz)."""
        b1, b2 = self.betas
        s = sum(((1 - b1) * b1 ** (t - j)) ** 2 / ((1 - b2) * b2 ** (t - j)) for j in range(1, t + 1))
        return math.sqrt(s) * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)

    def param_bounds(self, grads, deltas, params, decays=None):
        """grads[t][leaf]: torch's gradient at step t+1 (before clipping), deltas[t][leaf]:
        the bound on |ctg's - torch's| (0 where it must be exact), params[t][leaf]: torch's
        parameter after step t+1, decays[leaf]: its weight decay (default: weight_decay).
        Returns bounds[t][leaf] on |ctg's - torch's| parameter."""
        import torch
        b1, b2 = self.betas
        names = list(grads[0])
        clip_lo, clip_hi, sq = [], [], []
        out, prev = [], {n: torch.zeros_like(grads[0][n], dtype=torch.float64) for n in names}
        g_lo, g_hi = [], []
        for t in range(len(grads)):
            g = {n: grads[t][n].double() for n in names}
            d = {n: deltas[t][n].double() for n in names}
            norm = math.sqrt(sum(float((g[n] ** 2).sum()) for n in names))
            dnorm = math.sqrt(sum(float((d[n] ** 2).sum()) for n in names))

            def coef(x):
                return 1.0 if self.max_grad_norm <= 0 else min(1.0, self.max_grad_norm / (max(x, 0.0) + 1e-6))
            c_lo, c_hi = coef(norm + dnorm), coef(norm - dnorm)
            # the clipped gradient's interval (c > 0)
            g_lo.append({n: torch.minimum(c_lo * (g[n] - d[n]), c_hi * (g[n] - d[n])) for n in names})
            g_hi.append({n: torch.maximum(c_lo * (g[n] + d[n]), c_hi * (g[n] + d[n])) for n in names})
            step = t + 1
            B = self.direction_bound(step)
            bounds = {}
            for n in names:
                m_lo = sum((1 - b1) * b1 ** (t - j) * g_lo[j][n] for j in range(t + 1))
                m_hi = sum((1 - b1) * b1 ** (t - j) * g_hi[j][n] for j in range(t + 1))
                v_lo = v_hi = 0
                for j in range(t + 1):
                    lo, hi = g_lo[j][n], g_hi[j][n]
                    straddle = (lo <= 0) & (hi >= 0)
                    sq_lo = torch.where(straddle, torch.zeros_like(lo), torch.minimum(lo * lo, hi * hi))
                    sq_hi = torch.maximum(lo * lo, hi * hi)
                    w = (1 - b2) * b2 ** (t - j)
                    v_lo, v_hi = v_lo + w * sq_lo, v_hi + w * sq_hi
                bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
                den_lo = torch.sqrt(v_lo / bc2) + self.eps
                den_hi = torch.sqrt(v_hi / bc2) + self.eps
                corners = torch.stack([m_lo / bc1 / den_lo, m_lo / bc1 / den_hi, m_hi / bc1 / den_lo, m_hi / bc1 / den_hi])
                u_lo = corners.min(dim=0).values.clamp(-B, B)
                u_hi = corners.max(dim=0).values.clamp(-B, B)
                p = params[t][n].double().abs()
                wd = self.weight_decay if decays is None else decays[n]
                bounds[n] = (prev[n] * (1 - self.lr * wd) + self.lr * (u_hi - u_lo)
                             + self.ulps * U_F32 * (p + self.lr * B))
            out.append(bounds)
            prev = bounds
        return out


FAMILIES["model_adamw"] = {tag: AdamWTolerance(grad=FAMILIES["model"][tag]) for tag in ("f32", "bf16")}
