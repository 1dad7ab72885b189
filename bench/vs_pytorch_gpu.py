#!/usr/bin/python3
"""One training step of a transformer, ctg vs PyTorch, on one GPU: the same
model, batch and optimizer (bench/torch_transformer.py, bench/cuda/step.cu),
bf16 autocast, in the same process order on the same GPU: ctg's steps first
(bench_cuda_step, a separate program), then PyTorch eager and torch.compile.
Prints ms per step and tokens/s for each, and PyTorch's time over ctg's.

With --ops: single operations instead (bench/cuda/ops.cu, bench_cuda_ops):
ctg's figures, then the same operations in PyTorch eager and torch.compile,
timed the same way (CUDA events over 20 calls after 3 warm-ups).

    python3 bench/vs_pytorch_gpu.py [--size realistic|gpt2] [--steps N] [--no-compile]
                                    [--bench-dir build/default/bench] [--ops]

Run it with the Python whose PyTorch (CUDA build) is the peer.
"""
import argparse
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_transformer import SIZES, TorchStep  # noqa: E402


def time_ms(f):
    """Milliseconds per call of f, CUDA events over 20 calls after 3 warm-ups (as bench/cuda/timing.cuh)."""
    for _ in range(3):
        f()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        f()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 20


def torch_ops():
    """The operations of bench/cuda/ops.cu, by the same names: {name: (function of compiled?, ...)}."""
    bf16, f32, dev = torch.bfloat16, torch.float32, "cuda"

    def param(*shape, dtype=bf16):
        return torch.full(shape, 0.0115, dtype=dtype, device=dev).requires_grad_()

    act = (8192, 4096)
    g = torch.full(act, 0.0115, dtype=bf16, device=dev)

    def rmsnorm(x, s):
        xf = x.float()
        return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + 1e-5) * s.float()).to(bf16)

    def fwd_bwd(c, f, leaves, upstream):  # the loss sum(f(leaves) * upstream) compiled whole (c), with its backward
        loss = c(lambda *ls: (f(*ls).float() * upstream.float()).sum())
        return lambda: torch.autograd.grad(loss(*leaves), leaves)

    x, s = param(*act), param(4096)
    a, b = param(*act), param(*act)
    scores = torch.full((8 * 12 * 1024, 1024), 0.0115, dtype=f32, device=dev)
    xl, wl = param(8192, 8192), param(8192, 8192, dtype=f32)
    gl = torch.full((8192, 8192), 0.0115, dtype=bf16, device=dev)
    scale = torch.tensor(448.0, device=dev)

    def quantize(x):  # delayed scaling: this step's scale from the history, this step's amax recorded
        amax = x.abs().amax()
        q = (x.float() * scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return (q.float() / scale).to(bf16), amax

    def linear(x, w):
        with torch.autocast("cuda", dtype=bf16):
            return torch.matmul(x, w)

    xh, wh = param(8192, 768), param(768, 50304, dtype=f32)
    targets = (torch.arange(8192, device=dev) * 7919) % 50304

    def lm_head(c):  # the loss cross_entropy(x @ w, targets) compiled whole (c), with its backward
        def loss(x, w):
            with torch.autocast("cuda", dtype=bf16):
                return torch.nn.functional.cross_entropy(torch.matmul(x, w).float(), targets)
        f = c(loss)
        return lambda: torch.autograd.grad(f(xh, wh), (xh, wh))

    qa, ka, va = (param(8, 12, 1024, 64) for _ in range(3))
    ga = torch.full((8, 12, 1024, 64), 0.0115, dtype=bf16, device=dev)

    def attention(q, k, v):  # PyTorch's fused kernel (flash attention on this GPU)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return {
        "group swiglu [8192,4096] bf16": lambda c: (lambda f: lambda: f(a.detach(), b.detach()))(
            c(lambda p, q: torch.nn.functional.silu(p) * q)),
        "group rmsnorm [8192,4096] bf16": lambda c: (lambda f: lambda: f(x.detach(), s.detach()))(c(rmsnorm)),
        "group softmax [98304,1024] f32": lambda c: (lambda f: lambda: f(scores))(c(lambda t: t.softmax(-1))),
        # the probabilities and their bf16 cast, both kept (as attention's backward and its product with v read them)
        "group softmax + bf16 cast [98304,1024]": lambda c: (lambda f: lambda: f(scores))(
            c(lambda t: (lambda p: (p, p.to(bf16)))(t.softmax(-1)))),
        "rmsnorm_fwd_bwd [8192,4096] bf16": lambda c: fwd_bwd(c, rmsnorm, (x, s), g),
        "swiglu_fwd_bwd [8192,4096] bf16": lambda c: fwd_bwd(c, lambda p, q: torch.nn.functional.silu(p) * q,
                                                             (a, b), g),
        "quantize_e4m3_delayed+dequantize [8192,4096] bf16": lambda c: (lambda f: lambda: f(a.detach()))(
            c(quantize)),
        "linear_fwd_bwd 8192^3 bf16": lambda c: fwd_bwd(c, linear, (xl, wl), gl),
        "lm_head_fwd_bwd [8192,768]x[768,50304] bf16": lm_head,
        "attention_fwd_bwd [8,12,1024,64] bf16 fused": lambda c: fwd_bwd(c, attention, (qa, ka, va), ga),
    }


def ops(args):
    exe = os.path.join(args.bench_dir, "bench_cuda_ops")
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    print(out.strip())
    ctg_ms = {}
    for line in out.splitlines():
        if line.startswith("op ") and " ms " in line:
            name, rest = line[3:].split(" ms ", 1)
            ctg_ms[name] = float(rest.split()[0])
    peers = [("eager", lambda f: f)] + ([] if args.no_compile else [("compile", torch.compile)])
    torch_ms = {}
    for peer, wrap in peers:
        for name, make in torch_ops().items():
            torch_ms[(name, peer)] = time_ms(make(wrap))
        torch.cuda.empty_cache()
    print(f"\nSingle operations, {torch.cuda.get_device_name()}, PyTorch {torch.__version__}; ms per call "
          "(CUDA events, 20 calls after 3 warm-ups)\n")
    print("| operation | ctg ms | torch eager ms | torch.compile ms | eager / ctg | compile / ctg |")
    print("|---|---|---|---|---|---|")
    for name, ms in ctg_ms.items():
        e, c = torch_ms.get((name, "eager")), torch_ms.get((name, "compile"))
        fmt = lambda v: "" if v is None else f"{v:.3f}"
        ratio = lambda v: "" if v is None else f"{v / ms:.2f}"
        print(f"| {name} | {ms:.3f} | {fmt(e)} | {fmt(c)} | {ratio(e)} | {ratio(c)} |")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=("realistic", "gpt2"), default="gpt2")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true", help="PyTorch eager only")
    ap.add_argument("--ops", action="store_true", help="single operations (bench_cuda_ops) instead of steps")
    ap.add_argument("--bench-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                        "default", "bench"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device for PyTorch: skipped")
        return 77
    if args.ops:
        return ops(args)
    s = SIZES[args.size]
    tokens = s["B"] * s["T"]
    exe = os.path.join(args.bench_dir, "bench_cuda_step")
    out = subprocess.run([exe, "--size", args.size, "--steps", str(args.steps)], check=True, capture_output=True,
                         text=True).stdout
    print(out.strip())
    ctg_ms = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 3 and f[1] == "ms":
            ctg_ms[f[0]] = float(f[2])
    rows = []
    peers = [("eager", False)] + ([] if args.no_compile else [("compile", True)])
    for name, compiled in peers:
        st = TorchStep(s, torch.bfloat16, compiled, device="cuda")
        rows.append((f"torch {name}", st.median_ms(args.steps)))
        del st
        torch.cuda.empty_cache()
    print(f"\n{args.size} transformer, bf16 autocast, one training step (forward, backward, clipping, AdamW), "
          f"batch {s['B']} x {s['T']} tokens, {torch.cuda.get_device_name()}, PyTorch {torch.__version__}; "
          f"median of {args.steps} steps\n")
    print("| | ms per step | tokens/s | torch eager / this |")
    print("|---|---|---|---|")
    eager = rows[0][1]
    for name, ms in [(k, v) for k, v in ctg_ms.items() if k.startswith(args.size + "/bf16")] + rows:
        print(f"| {name} | {ms:.2f} | {tokens / (ms * 1e-3):.0f} | {eager / ms:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
