"""Oracle check of the layers (dumped by layers_dump.cpp): each nn layer alone,
under full<f32> (cases "<layer>.f32") and autocast<bf16> ("<layer>.bf16"; the
embedding's bf16 case is full<bf16>, see layers_dump.cpp). Each formula is the
layer in PyTorch (torch_nn.py) from the leaves ctg used, in float64, with the
bf16 roundings of the case's policy mirrored (torch_nn.Policy). oracle.py forms
the loss sum(out * r) (or takes the cross-entropy itself as the loss),
differentiates it with torch.autograd and compares the value, the loss and
every parameter's gradient with tolerances.py's "layers.<layer>" rows.

    /usr/bin/python3 check_layers.py --dump <oracle_layers_dump> --bundle <file>
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

torch = oracle.require_torch()
import tolerances  # noqa: E402
import torch_nn as nn  # noqa: E402

cases = oracle.Cases()


def policy(t, bf16=nn.AUTOCAST_BF16):
    """The case's policy, from its dtype tag."""
    tag = t.case.rpartition(".")[2]
    return {"f32": nn.FULL_F32, "bf16": bf16}[tag]


# In each formula, P.low_(leaf) marks a leaf that ctg holds in the matmul dtype
# (bf16 under autocast): it rounds nothing (the values are bf16) but makes the
# gradient reaching that leaf bf16, as ctg's is.

@cases.formula("linear", tolerances="layers.linear")
def linear(t):
    P = policy(t)
    return nn.linear(P.low_(t["x"]), t["lin.weight"], P)


@cases.formula("linear_bias", tolerances="layers.linear")
def linear_bias(t):
    P = policy(t)
    return nn.linear(t["x"], t["lin.weight"], P, b=t["lin.bias"])


@cases.formula("rms_norm", tolerances="layers.norm")
def rms_norm(t):
    P = policy(t)
    return nn.rms_norm(P.low_(t["x"]), t["norm.scale"], P)


@cases.formula("layer_norm", tolerances="layers.norm")
def layer_norm(t):
    P = policy(t)
    return nn.layer_norm(P.low_(t["x"]), t["norm.scale"], t["norm.bias"], P)


@cases.formula("swiglu", tolerances="layers.swiglu")
def swiglu(t):
    P = policy(t)
    return nn.swiglu(t["x"], t["mlp.w1"], t["mlp.w3"], t["mlp.w2"], P)


@cases.formula("attention", tolerances="layers.attention")
def attention(t):
    P = policy(t)
    x, wq, wk = t["x"], t["attn.wq"], t["attn.wk"]
    heads = 2  # layers_dump.cpp: causal_self_attention<"attn", 2, 4, P>
    # the bf16 count in tolerances.py assumes logits this small (softmax conditioning ~1)
    with torch.no_grad():
        q_t = (wq @ x.transpose(-1, -2)).unflatten(-2, (heads, -1))  # [..., H, Dh, T]
        k_t = (wk @ x.transpose(-1, -2)).unflatten(-2, (heads, -1))
        z = (q_t.transpose(-1, -2) @ k_t).tril() / q_t.shape[-2] ** 0.5
        if z.abs().max().item() > tolerances.LAYER_ATTENTION_MAX_LOGIT:
            raise ValueError(f"attention logits up to {z.abs().max().item():.3g} > "
                             f"{tolerances.LAYER_ATTENTION_MAX_LOGIT} assumed by the bf16 count")
    return nn.causal_self_attention(x, wq, wk, t["attn.wv"], t["attn.wo"], heads, P)


@cases.formula("attention_fused", tolerances="layers.attention")
def attention_fused(t):
    # ctg's fused heads (ctg::causal_attention) compute the same layer: the same formula, the same bounds
    # (they round less: no bf16 probabilities)
    return attention(t)


@cases.formula("embedding", tolerances="layers.embedding")
def embedding(t):
    P = policy(t, bf16=nn.FULL_BF16)
    return nn.embedding(t["emb.weight"], t["ids"], P)


@cases.formula("cross_entropy", tolerances="layers.cross_entropy")
def cross_entropy(t):  # the loss itself (no r)
    P = policy(t)
    return nn.cross_entropy(P.stats(P.low_(t["logits"])), t["targets"])


if __name__ == "__main__":
    sys.exit(oracle.main(cases))
