"""Oracle check of the tiny transformer (dumped by model_dump.cpp):
ctg::nn::transformer<tiny, P> under full<f32> (".f32") and autocast<bf16> (".bf16").

  model.<tag>        the loss and every parameter's gradient of one step, against
                     the model below (torch.autograd on float64 leaves).
  model_adamw.<tag>  an independent PyTorch training run from the same initial
                     parameters and data: 3 steps of forward/backward (the model
                     below, from torch's own updated float32 parameters each step),
                     torch.nn.utils.clip_grad_norm_(max_norm=1.0) and
                     torch.optim.AdamW(lr=1e-2, weight_decay=0.1: under f32 only
                     leaves of two dims or more in one layer, decay_leaves::matrices,
                     a param group of weight_decay 0 for the others; every leaf
                     under bf16); compared per
                     step: the loss, the global gradient norm before clipping,
                     every gradient, and every parameter after the update.

The model is written from the math in include/ctg/nn/transformer.hpp's header
with the layers of torch_nn.py (pre-norm decoder, the residual stream in the stats
type: f32 in ctg, f64 here); the policy mirrors ctg's bf16 roundings
(torch_nn.Policy). Stacked leaves "layers.{i}.<x>" have a leading dim = layers:
slice k is layer k. Tolerances: tolerances.py, families "model" and "model_adamw"
(under autocast<bf16> from simulated roundings, torch_nn.MonteCarlo).

    /usr/bin/python3 check_model.py --dump <oracle_model_dump> --bundle <file>
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

torch = oracle.require_torch()
import tolerances  # noqa: E402
import torch_nn as nn  # noqa: E402

POLICIES = {"f32": nn.FULL_F32, "bf16": nn.AUTOCAST_BF16}
SEED = 1234  # of the simulated roundings

cases = oracle.Cases()


HEADS = 2  # model_dump.cpp's config: 2 heads of 8


def transformer_loss(p, ids, pos, targets, P):
    """cross_entropy(rms_norm(blocks(tok[ids] + pos[pos])) @ lm_head, targets), with
    block(x) = h + swiglu(rms_norm(h)),  h = x + attention(rms_norm(x))."""
    h = P.stats(nn.embedding(p["tok.weight"], ids, P)) + P.stats(nn.embedding(p["pos.weight"], pos, P))
    for k in range(p["layers.{i}.attn.wq"].shape[0]):
        def w(name):
            return p["layers.{i}." + name][k]
        a = nn.causal_self_attention(nn.rms_norm(h, w("ln1.scale"), P),
                                     w("attn.wq"), w("attn.wk"), w("attn.wv"), w("attn.wo"), HEADS, P)
        h = h + P.stats(a)
        m = nn.swiglu(nn.rms_norm(h, w("ln2.scale"), P), w("mlp.w1"), w("mlp.w3"), w("mlp.w2"), P)
        h = h + P.stats(m)
    logits = nn.linear(nn.rms_norm(h, p["ln_f.scale"], P), p["lm_head.weight"], P)
    return nn.cross_entropy(P.stats(logits), targets)


def records(parts, prefix):
    """{name: tensor} of the records '<prefix><name>'."""
    return {path[len(prefix):]: t for path, t in parts.items() if path.startswith(prefix)}


def spread(samples):
    """Elementwise standard deviation over a list of tensors (or floats)."""
    return torch.stack([torch.as_tensor(s, dtype=torch.float64) for s in samples]).std(dim=0)


def grad_allowed(tol, ref, scale, samples=None):
    """The allowed |ctg - torch| of each element of ref: 0 for structural zeros (exactly 0
    in torch and, under autocast<bf16>, in every simulated evaluation: embedding rows of
    tokens that never occur), which ctg must reproduce exactly."""
    if isinstance(tol, tolerances.MonteCarloTolerance):
        s = spread(samples)
        allowed, structural = tol.allowed(ref, scale, s), (ref == 0) & (s == 0)
    else:
        allowed, structural = tol.allowed(ref, scale), ref == 0
    return torch.where(structural, torch.zeros_like(allowed), allowed)


def how(tol):
    if isinstance(tol, tolerances.MonteCarloTolerance):
        return (f"{tol.lam:g} sqrt(2) x the spread of {tol.samples} simulated bf16 evaluations "
                f"+ rtol {tol.base.rtol:.3g}, floor {tol.base.floor:.3g} x scale")
    return f"rtol {tol.rtol:.3g}, floor {tol.floor:.3g} x scale"


@cases.check("model", tolerances="model")
def model(chk, case, parts, tol):
    """The loss and every gradient of one step; under autocast<bf16> the allowed error
    comes from tol.samples simulated evaluations (tolerances.MonteCarloTolerance)."""
    P = POLICIES[case.rpartition(".")[2]]
    init, inputs, got = records(parts, "param/"), records(parts, "input/"), records(parts, "grad/")
    names = list(init)
    for path in parts:
        if path.split("/")[0] not in ("param", "input", "grad", "loss"):
            chk.error(case, f"unknown record '{path}'")
    if set(got) != set(names) or "loss" not in parts:
        chk.error(case, f"needs loss and grad/<leaf> for every param/<leaf> (params {names}, grads {list(got)})")
        return

    def run(policy):
        p = {n: init[n].double().requires_grad_(True) for n in names}
        loss = transformer_loss(p, inputs["ids"], inputs["pos"], inputs["targets"], policy)
        return loss.detach(), [g.detach() for g in torch.autograd.grad(loss, [p[n] for n in names])]

    loss, grads = run(P)
    sims = None
    if isinstance(tol, tolerances.MonteCarloTolerance):
        gen = torch.Generator().manual_seed(SEED)
        sims = [run(nn.MonteCarlo(gen)) for _ in range(tol.samples)]
    allowed = grad_allowed(tol, loss, abs(loss.item()), sims and [s[0] for s in sims])
    chk.compare_allowed(case, "loss", parts["loss"].reshape(()), loss, allowed, how(tol))
    for i, (n, g) in enumerate(zip(names, grads)):
        if got[n].dtype != init[n].dtype:
            chk.error(case, f"grad/{n}: dtype {got[n].dtype}, but the param is {init[n].dtype}")
            continue
        if not bool((g != 0).any()):
            chk.error(case, f"grad/{n}: the torch gradient is zero everywhere: nothing is checked")
            continue
        allowed = grad_allowed(tol, g, g.abs().max().item(), sims and [s[1][i] for s in sims])
        chk.compare_allowed(case, "grad/" + n, got[n], g, allowed, how(tol))


def weight_decays(init, matrices_only, weight_decay):
    """Each leaf's weight decay: every leaf's, or (matrices_only) only that of leaves of two
    dims or more in one layer: a stacked leaf "layers.{i}.<x>" has one dim more, the layers'."""
    def per_layer_dims(name, v):
        return v.dim() - (1 if "{i}" in name else 0)
    return {n: weight_decay if not matrices_only or per_layer_dims(n, v) >= 2 else 0.0 for n, v in init.items()}


def train(init, inputs, P, steps, opt_tol, decays, to_model=lambda p: p):
    """A torch training run (float32 parameters, torch.optim.AdamW with one param group per
    weight decay in `decays` (leaf: decay), clip_grad_norm_).
    Returns per step: (loss, grad norm before clipping, {leaf: f32 gradient}, {leaf: param})."""
    params = {n: torch.nn.Parameter(v.clone().float()) for n, v in init.items()}
    groups = [{"params": [params[n] for n in params if decays[n] == wd], "weight_decay": wd}
              for wd in sorted(set(decays.values()))]
    opt = torch.optim.AdamW(groups, lr=opt_tol.lr, betas=opt_tol.betas, eps=opt_tol.eps)
    out = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = transformer_loss(to_model(params), inputs["ids"], inputs["pos"], inputs["targets"], P)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in params.items()}
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), opt_tol.max_grad_norm)
        opt.step()
        out.append((loss.detach().double(), norm.detach().double(), grads,
                    {n: p.detach().clone() for n, p in params.items()}))
    return out


@cases.check("model_adamw", tolerances="model_adamw")
def model_adamw(chk, case, parts, tol):
    """parts: param/<leaf> (initial), input/<x>, decay (1: matrices only, 0: every leaf),
    step<k>/{loss, grad_norm, grad/<leaf>, param/<leaf>}."""
    P = POLICIES[case.rpartition(".")[2]]
    init, inputs = records(parts, "param/"), records(parts, "input/")
    names = list(init)
    steps = sorted({int(path.split("/")[0][4:]) for path in parts if path.startswith("step")})
    if not names or not steps or steps != list(range(1, len(steps) + 1)) or "decay" not in parts:
        chk.error(case, f"expected param/*, input/*, decay and step1..N records (steps found: {steps})")
        return
    decays = weight_decays(init, bool(parts["decay"].item()), tol.weight_decay)
    ref = train(init, inputs, P, len(steps), tol, decays)
    sims = None
    if isinstance(tol.grad, tolerances.MonteCarloTolerance):
        gen = torch.Generator().manual_seed(SEED)

        def to_model(params):  # the simulation takes float64 parameters
            return {n: v.double() for n, v in params.items()}
        sims = [train(init, inputs, nn.MonteCarlo(gen), len(steps), tol, decays, to_model)
                for _ in range(tol.grad.samples)]

    deltas = []
    for t, k in enumerate(steps):
        at = f"step{k}/"
        loss, norm, grads, _ = ref[t]
        got_grads = records(parts, at + "grad/")
        # 1. the gradients ctg used at this step, against torch's at the same point (ctg's
        #    parameters after the previous step): within the gradient row, exact zeros exact.
        #    (AdamW moves an element whose gradient is within its tolerance of 0 by up to 2 lr
        #    either way, which moves every later gradient: torch's own run is another point.)
        #    The bounds below follow torch's run, so ctg's difference from it is at most the
        #    allowed difference plus torch's gradient at ctg's point minus torch's own.
        at_ctg = grads if t == 0 else train(records(parts, f"step{steps[t - 1]}/param/"), inputs, P, 1, tol,
                                           decays)[0][2]
        delta = {}
        for n in names:
            g = at_ctg[n].double()
            allowed = grad_allowed(tol.grad, g, g.abs().max().item(), sims and [s[t][2][n] for s in sims])
            chk.compare_allowed(case, at + "grad/" + n, got_grads[n], g, allowed, how(tol.grad))
            delta[n] = allowed + (g - grads[n].double()).abs()
        deltas.append(delta)
        # 2. the gradient norm before clipping: | ||a|| - ||b|| | <= ||a - b||
        dnorm = torch.sqrt(sum((delta[n] ** 2).sum() for n in names))
        chk.compare_allowed(case, at + "grad_norm", parts[at + "grad_norm"].reshape(()), norm, dnorm,
                            "the norm of the gradients' allowed differences")
        # 3. every parameter after the update, and the loss of this step (which saw the
        #    parameters after the previous update)
        bounds = tol.param_bounds([r[2] for r in ref[:t + 1]], deltas, [r[3] for r in ref[:t + 1]], decays)
        prev = bounds[t - 1] if t > 0 else {n: torch.zeros_like(grads[n], dtype=torch.float64) for n in names}
        drift = sum((grads[n].double().abs() * prev[n]).sum() for n in names)
        allowed = grad_allowed(tol.grad, loss, abs(loss.item()), sims and [s[t][0] for s in sims]) + drift
        chk.compare_allowed(case, at + "loss", parts[at + "loss"].reshape(()), loss, allowed,
                            how(tol.grad) + " + sum |g| x the previous parameter bound")
        for n in names:
            chk.compare_allowed(case, at + "param/" + n, parts[at + "param/" + n], ref[t][3][n].double(),
                                bounds[t][n], "AdamW bound from the gradients' allowed differences")
        if chk.verbose:
            d = max(((parts[at + "param/" + n].double() - ref[t][3][n].double()).abs().max().item()
                     for n in names))
            b = max((bounds[t][n].max().item() for n in names))
            print(f"       {case:<24} {at}params: max |ctg - torch| {d / tol.lr:.2e} lr, "
                  f"largest allowed {b / tol.lr:.2e} lr")


if __name__ == "__main__":
    sys.exit(oracle.main(cases))
