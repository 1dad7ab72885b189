"""The PyTorch peer of ctg's nn::transformer, for the benchmarks that run
both (bench/vs_pytorch_cpu.py, bench/vs_pytorch_gpu.py): the same model,
batch and optimizer as bench/lm_step.hpp and bench/cuda/step.cu.

Pre-norm blocks (RMSNorm), learned positions, untied head, causal attention
(q, k, v and output projections [H*DH, D] as nn.Linear's, softmax written out
as ctg computes it: no flash attention on either side), SwiGLU; AdamW (wd 0.1) with global-norm clipping
at 1.0. bf16 = f32 master weights, bf16 matmuls, f32 norms / softmax / loss
(ctg's autocast<bf16>, written as explicit casts).
"""
import math
import statistics
import time

import torch
import torch.nn.functional as F

# Keep in sync with bench/tiny_lm_step.cpp, bench/realistic_lm_step.cpp and bench/cuda/step.cu.
SIZES = {
    # V, MAXT, D, H, DH, HID, LAYERS, B, T
    "tiny": dict(V=96, MAXT=64, D=64, H=4, DH=16, HID=172, LAYERS=2, B=8, T=64),
    "realistic": dict(V=256, MAXT=128, D=256, H=8, DH=32, HID=688, LAYERS=4, B=8, T=128),
    "gpt2": dict(V=50304, MAXT=1024, D=768, H=12, DH=64, HID=2048, LAYERS=12, B=8, T=1024),
}


def make_params(s, gen, device):
    def w(*shape):
        return (torch.randn(*shape, generator=gen) * 0.02).to(device).requires_grad_()

    def ones(*shape):
        return torch.ones(*shape, device=device).requires_grad_()

    V, MAXT, D, H, DH, HID = s["V"], s["MAXT"], s["D"], s["H"], s["DH"], s["HID"]
    p = {"tok": w(V, D), "pos": w(MAXT, D), "ln_f": ones(D), "head": w(D, V)}
    for i in range(s["LAYERS"]):
        p.update({f"{i}.ln1": ones(D), f"{i}.wq": w(H * DH, D), f"{i}.wk": w(H * DH, D), f"{i}.wv": w(H * DH, D),
                  f"{i}.wo": w(H * DH, D), f"{i}.ln2": ones(D), f"{i}.w1": w(D, HID), f"{i}.w3": w(D, HID),
                  f"{i}.w2": w(HID, D)})
    return p


def rms_norm(x, scale):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5) * scale


def loss_fn(p, ids, pos, targets, mm, s):
    c = (lambda t: t.to(mm)) if mm is not None else (lambda t: t)
    T = ids.shape[-1]
    x = p["tok"][ids] + p["pos"][pos]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=ids.device), 1)
    for i in range(s["LAYERS"]):
        a = c(rms_norm(x, p[f"{i}.ln1"]))  # [B,T,D]
        q, k, v = ((a @ c(p[f"{i}.{w}"]).t()).unflatten(-1, (s["H"], s["DH"])).transpose(1, 2)
                   for w in ("wq", "wk", "wv"))  # [B,H,T,DH]
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(s["DH"])
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), -1)
        x = x + ((c(probs) @ v).transpose(1, 2).flatten(-2) @ c(p[f"{i}.wo"])).float()
        m = c(rms_norm(x, p[f"{i}.ln2"]))
        x = x + ((F.silu(m @ c(p[f"{i}.w1"])) * (m @ c(p[f"{i}.w3"]))) @ c(p[f"{i}.w2"])).float()
    logits = (c(rms_norm(x, p["ln_f"])) @ c(p["head"])).float()
    return F.cross_entropy(logits.reshape(-1, s["V"]), targets.reshape(-1))


class TorchStep:
    """One training step (forward, backward, clipping, AdamW) of size s, matmuls in mm (None: f32)."""

    def __init__(self, s, mm, compiled, device="cpu"):
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(1)
        self.s, self.mm, self.device = s, mm, device
        self.p = make_params(s, gen, device)
        self.opt = torch.optim.AdamW(self.p.values(), lr=1e-3, weight_decay=0.1)
        i = torch.arange(s["B"] * s["T"])
        self.ids = ((i * 7 + 3) % s["V"]).reshape(s["B"], s["T"]).to(device)
        self.targets = ((i * 7 + 10) % s["V"]).reshape(s["B"], s["T"]).to(device)
        self.pos = torch.arange(s["T"]).to(device)
        self.loss = torch.compile(loss_fn) if compiled else loss_fn
        for _ in range(3):  # warm-up (and compilation)
            self.step()

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(self.p, self.ids, self.pos, self.targets, self.mm, self.s)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.p.values(), 1.0)
        self.opt.step()
        if self.device != "cpu":
            torch.cuda.synchronize()

    def median_ms(self, iters):
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            self.step()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
