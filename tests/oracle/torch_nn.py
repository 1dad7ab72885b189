"""PyTorch reference layers for the oracle (check_layers.py, check_model.py),
written from the math of ctg's layer headers (include/ctg/nn/*.hpp), not from
ctg's internals, plus a precision policy that says where values are rounded.

Every function takes float64 tensors (the leaves the oracle driver makes) and a
Policy. The arithmetic itself is always float64; a policy only adds roundings,
at exactly the places where ctg's policy makes a tensor narrow:

  FULL_F32       full<f32>: no rounding at all. The reference is the exact (f64)
                 value of the layer; ctg's f32 roundings are what the f32
                 tolerance measures.
  AUTOCAST_BF16  autocast<bf16>: f32 parameters; every matmul operand is cast to
                 bf16 (cast<bf16>: rounds an f32 value, exact for a bf16 one); every
                 matmul result, and every elementwise node computed from bf16
                 operands (silu, the SwiGLU product, a bias add), is a bf16 tensor, rounded once from its f64
                 value; norms, softmax and the loss run in f64 here (f32 in ctg:
                 its stats type).
  FULL_BF16      full<bf16>: as AUTOCAST_BF16, and the parameters are bf16 too.

A narrow node is computed as `fn(x.double()...).to(bfloat16)`, on real bfloat16
torch tensors, so that autograd mirrors ctg's backward roundings too: the
gradient arriving at a bf16 tensor is bf16, and the gradient a bf16 node passes
to each bf16 operand is rounded to bf16 once (the backward of `.double()` on a
bf16 tensor). PyTorch's own bf16 kernels are not used for the arithmetic: some
are not correctly rounded (F.silu on bf16, torch 1.13 CPU: up to 1.9 u = 7.4e-3
off the exact value on this machine, where one rounding is at most u = 2^-8),
while this mirror rounds each node exactly once.

MonteCarlo(generator) is the same autocast<bf16> program with every bf16 rounding
of a COMPUTED value (forward, and each gradient contribution to a bf16 tensor in
backward) replaced by a random relative error d ~ U(-u, u), u = 2^-8, and the
roundings of inputs (f32 parameters cast to bf16) kept exact: one sample of a
bf16 evaluation of the model under the standard probabilistic model of rounding
errors. tolerances.py uses the spread of many samples as the rounding noise of
each compared value (check_model.py). Narrow tensors are carried as float32 in
this mode (their simulated values are not bf16 numbers), everything else in float64,
so parameters must be passed as float64.
"""
import math

import torch

F = torch.nn.functional
EPS = 1e-5
IGNORE = -100


class Policy:
    def __init__(self, name, param, low):
        self.name = name
        self.param_dtype = param  # None: parameters keep their (f32-exact) values
        self.low = low            # None: matmuls and their results stay f64

    def param(self, p):
        """A parameter as the layer sees it (bf16 under full<bf16>)."""
        return p if self.param_dtype is None else p.to(self.param_dtype)

    def low_(self, x):
        """cast<matmul_type>(x) of an activation: a matmul operand."""
        return x if self.low is None or x.dtype == self.low else x.to(self.low)

    def cast_param(self, w):
        """cast<matmul_type>(w) of a weight (a parameter, or a narrow activation used as one)."""
        return self.low_(w)

    def node(self, fn, *xs):
        """A node whose operands are in the matmul type: computed in f64, rounded once to it."""
        y = fn(*(x.double() for x in xs))
        return y if self.low is None else y.to(self.low)

    def stats(self, x):
        """cast<stats_type>(x): norms, softmax, the loss (f32 in ctg, f64 here)."""
        return x.double()

    def __repr__(self):
        return self.name


FULL_F32 = Policy("full<f32>", None, None)
AUTOCAST_BF16 = Policy("autocast<bf16>", None, torch.bfloat16)
FULL_BF16 = Policy("full<bf16>", torch.bfloat16, torch.bfloat16)

U_BF16 = 2.0 ** -8  # bf16 unit roundoff (tolerances.U_BF16)


class _RoundComputed(torch.autograd.Function):
    """A simulated bf16 rounding of a computed value: forward x * (1 + d); backward,
    the gradient of the narrow tensor (a bf16 sum of its consumers' contributions)
    g * (1 + d'). The result is carried as float32."""

    @staticmethod
    def forward(ctx, x, mc):
        ctx.mc = mc
        x = x.double()
        return (x * (1 + mc.noise(x))).float()

    @staticmethod
    def backward(ctx, g):
        g = g.double()
        return g * (1 + ctx.mc.noise(g)), None


class _ReadNarrow(torch.autograd.Function):
    """A narrow (float32-carried) tensor read by f64 arithmetic: exact forward; the
    gradient contribution it receives is rounded to bf16 (simulated) in backward."""

    @staticmethod
    def forward(ctx, x, mc):
        ctx.mc = mc
        return x.double()

    @staticmethod
    def backward(ctx, g):
        g = g.double()
        return (g * (1 + ctx.mc.noise(g))).float(), None


class MonteCarlo(Policy):
    """autocast<bf16> with simulated roundings (see the module docstring)."""

    def __init__(self, generator):
        super().__init__("autocast<bf16>, simulated roundings", None, torch.float32)
        self.gen = generator

    def noise(self, t):
        return (torch.rand(t.shape, generator=self.gen, dtype=torch.float64) * 2 - 1) * U_BF16

    def _read(self, x):
        return _ReadNarrow.apply(x, self) if x.dtype == torch.float32 else x

    def low_(self, x):
        return x if x.dtype == torch.float32 else _RoundComputed.apply(x, self)

    def cast_param(self, w):  # an input rounding: exact, as in ctg and in the mirror
        return w if w.dtype == torch.float32 else w.to(torch.bfloat16).float()

    def node(self, fn, *xs):
        return _RoundComputed.apply(fn(*(self._read(x) for x in xs)), self)

    def stats(self, x):
        return self._read(x)


def linear(x, w, P, b=None):
    """y = x @ W (+ b), W [in, out]."""
    y = P.node(torch.matmul, P.low_(x), P.cast_param(P.param(w)))
    if b is not None:
        y = P.node(torch.add, y, P.cast_param(P.param(b)))
    return y


def rms_norm(x, scale, P, eps=EPS):
    """x / sqrt(mean(x^2) + eps) * scale over the last dim, in the stats type."""
    xs = P.stats(x)
    return xs * torch.rsqrt(xs.square().mean(dim=-1, keepdim=True) + eps) * P.stats(P.param(scale))


def layer_norm(x, scale, bias, P, eps=EPS):
    """(x - mean) / sqrt(var + eps) * scale + bias (biased variance), in the stats type."""
    xs = P.stats(x)
    return F.layer_norm(xs, (xs.shape[-1],), weight=P.stats(P.param(scale)), bias=P.stats(P.param(bias)), eps=eps)


def swiglu(x, w1, w3, w2, P):
    """(silu(x @ W1) * (x @ W3)) @ W2."""
    gate = P.node(F.silu, linear(x, w1, P))
    return linear(P.node(torch.mul, gate, linear(x, w3, P)), w2, P)


def embedding(table, ids, P):
    """Rows of the table [vocab, dim] picked by ids, in the parameter dtype. The
    gradient is a scatter-add over repeated ids (exact here, rounded once to bf16
    under full<bf16>)."""
    w = P.param(table)
    if w.dtype == torch.float64:
        return w[ids.long()]
    return w.double()[ids.long()].to(w.dtype)


def causal_self_attention(x, wq, wk, wv, wo, heads, P):
    """Multi-head causal self-attention over x [..., T, d] with `heads` heads,
    wq/wk/wv [H*Dh, d] (nn.Linear's [out, in]) and wo [H*Dh, d] ([in, out]):
        y = concat_h(softmax(mask(q_h k_h^T / sqrt(Dh))) v_h) @ wo,
    every head's values computed transposed, as ctg does (nn/attention.hpp):
    q^T = wq @ x^T [..., H*Dh, T] viewed as [..., H, Dh, T], o_h^T = v_h^T probs_h^T."""
    xt = P.low_(x).transpose(-1, -2)                                  # [..., d, T]

    def per_head(w):                                                  # [..., H, Dh, T]
        return P.node(torch.matmul, P.cast_param(P.param(w)), xt).unflatten(-2, (heads, -1))
    q_t, k_t, v_t = per_head(wq), per_head(wk), per_head(wv)
    head_dim = q_t.shape[-2]
    scores = P.stats(P.node(torch.matmul, q_t.transpose(-1, -2), k_t)) / math.sqrt(head_dim)
    t = scores.shape[-1]
    future = torch.ones(t, t, dtype=torch.bool).triu(1)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    o_t = P.node(torch.matmul, v_t, P.low_(probs).transpose(-1, -2))  # [..., H, Dh, T]
    return linear(o_t.flatten(-3, -2).transpose(-1, -2), wo, P)       # [..., T, H*Dh] @ wo


def cross_entropy(logits, targets, ignore_index=IGNORE):
    """Mean over the targets that are not ignore_index of -log_softmax(logits)[target]."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(),
                           ignore_index=ignore_index, reduction="mean")
