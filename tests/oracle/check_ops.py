"""Oracle check of the core ops (dumped by ops_dump.cpp): each formula is the
case's output in PyTorch, from the leaves ctg used (float64). The loss
sum(out * r) and its gradients are formed by oracle.py with torch.autograd.

    /usr/bin/python3 check_ops.py --dump <oracle_ops_dump> --bundle <file>
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

torch = oracle.require_torch()
F = torch.nn.functional
EPS = 1e-5

cases = oracle.Cases()


@cases.formula("matmul_bcast")
def matmul_bcast(t):  # [2,1,5,4] @ [3,4,6] -> [2,3,5,6]
    return torch.matmul(t["a"], t["b"])


@cases.formula("matmul_nt")
def matmul_nt(t):
    return torch.matmul(t["a"], t["b"].transpose(-1, -2))


@cases.formula("transpose")
def transpose(t):
    return t["x"].transpose(-1, -2)


@cases.formula("softmax")
def softmax(t):
    return torch.softmax(t["x"], dim=-1)


@cases.formula("log_softmax")
def log_softmax(t):
    return torch.log_softmax(t["x"], dim=-1)


@cases.formula("rms_norm")
def rms_norm(t):
    x = t["x"]
    return x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + EPS) * t["w"]


@cases.formula("layer_norm")
def layer_norm(t):
    x = t["x"]
    return F.layer_norm(x, (x.shape[-1],), weight=t["g"], bias=t["b"], eps=EPS)


@cases.formula("activations")
def activations(t):
    x = t["x"]
    return torch.sigmoid(x) * torch.tanh(F.silu(F.gelu(x) * t["w"]))


@cases.formula("unary_misc")
def unary_misc(t):
    p, q = t["p"], t["q"]
    return (torch.sqrt(p) * torch.log(p) + torch.exp(q) * torch.rsqrt(p) + q.abs() * q.square()
            + torch.relu(q) - q)


@cases.formula("sum_axis")
def sum_axis(t):
    return t["x"].sum(dim=1, keepdim=True)


@cases.formula("mean_axis")
def mean_axis(t):
    return t["x"].mean(dim=-1, keepdim=True)


@cases.formula("max_axis")
def max_axis(t):  # amax: ties share the gradient evenly, as ctg's max does
    return t["x"].amax(dim=0, keepdim=True)


@cases.formula("reduce_whole")
def reduce_whole(t):
    x, y = t["x"], t["y"]
    return x * y.sum() + y * x.mean() + x.amax()


@cases.formula("bcast_arith")
def bcast_arith(t):
    x, b, s, d = t["x"], t["b"], t["s"], t["d"]
    return (x + b) * s / d + b / (s + x * x + 1.0)


@cases.formula("bcast_dyn")
def bcast_dyn(t):
    u, b, s = t["u"], t["b"], t["s"]
    return (u - b) / s + u * b


@cases.formula("mixed_matmul")
def mixed_matmul(t):
    return t["a"] @ t["b"]


if __name__ == "__main__":
    sys.exit(oracle.main(cases))
