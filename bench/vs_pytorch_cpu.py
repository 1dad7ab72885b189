#!/usr/bin/python3
"""One training step of the tiny transformer, ctg vs PyTorch eager, on the CPU,
same thread count (1: the ctg CPU backend is single-threaded), same model,
same batch. Runs build/default/bench/bench_tiny_lm_step and then the PyTorch
step in this process, and prints both and the ratio.

    /usr/bin/python3 bench/vs_pytorch_cpu.py [path/to/bench_tiny_lm_step]

The model (keep in sync with bench/tiny_lm_step.cpp): vocab 96, max_seq 64,
dim 64, 4 heads of 16, SwiGLU hidden 172, 2 pre-norm blocks (RMSNorm),
learned positions, untied head; batch 8 x 64 tokens; AdamW (wd 0.1) with
global-norm clipping at 1.0. bf16 = f32 master weights, bf16 matmuls, f32
norms / softmax / loss (ctg's autocast<bf16>, written as explicit casts).
"""
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

V, MAXT, D, H, DH, HID, LAYERS = 96, 64, 64, 4, 16, 172, 2
B, T = 8, 64


def make_params(gen):
    def w(*shape):
        return (torch.randn(*shape, generator=gen) * 0.02).requires_grad_()

    def ones(*shape):
        return torch.ones(*shape).requires_grad_()

    p = {"tok": w(V, D), "pos": w(MAXT, D), "ln_f": ones(D), "head": w(D, V)}
    for i in range(LAYERS):
        p.update({f"{i}.ln1": ones(D), f"{i}.wq": w(H, D, DH), f"{i}.wk": w(H, D, DH), f"{i}.wv": w(H, D, DH),
                  f"{i}.wo": w(H, DH, D), f"{i}.ln2": ones(D), f"{i}.w1": w(D, HID), f"{i}.w3": w(D, HID),
                  f"{i}.w2": w(HID, D)})
    return p


def rms_norm(x, scale):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5) * scale


def loss_fn(p, ids, pos, targets, mm):
    c = (lambda t: t.to(mm)) if mm is not None else (lambda t: t)
    x = p["tok"][ids] + p["pos"][pos]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(LAYERS):
        a = c(rms_norm(x, p[f"{i}.ln1"])).unsqueeze(1)  # [B,1,T,D]
        q, k, v = a @ c(p[f"{i}.wq"]), a @ c(p[f"{i}.wk"]), a @ c(p[f"{i}.wv"])
        s = (q @ k.transpose(-1, -2)).float() / math.sqrt(DH)
        probs = torch.softmax(s.masked_fill(mask, float("-inf")), -1)
        x = x + ((c(probs) @ v) @ c(p[f"{i}.wo"])).sum(1).float()
        m = c(rms_norm(x, p[f"{i}.ln2"]))
        x = x + ((F.silu(m @ c(p[f"{i}.w1"])) * (m @ c(p[f"{i}.w3"]))) @ c(p[f"{i}.w2"])).float()
    logits = (c(rms_norm(x, p["ln_f"])) @ c(p["head"])).float()
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def torch_step_ms(mm, iters=20):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    p = make_params(gen)
    opt = torch.optim.AdamW(p.values(), lr=1e-3, weight_decay=0.1)
    i = torch.arange(B * T)
    ids, targets = ((i * 7 + 3) % V).reshape(B, T), ((i * 7 + 10) % V).reshape(B, T)
    pos = torch.arange(T)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(p, ids, pos, targets, mm)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(p.values(), 1.0)
        opt.step()

    for _ in range(3):
        step()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    exe = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "build", "default",
                                                             "bench", "bench_tiny_lm_step")
    torch.set_num_threads(1)
    out = subprocess.run([exe, "--benchmark_format=json", "--benchmark_repetitions=5",
                          "--benchmark_report_aggregates_only=true"], check=True, capture_output=True, text=True)
    ctg_ms = {}
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            # "tiny_lm_step/<policy>[/<variant>]/real_time" -> "<policy>[/<variant>]"
            ctg_ms[b["run_name"].split("/", 1)[1].removesuffix("/real_time")] = b["real_time"]
    print(f"tiny transformer train step, batch {B} x {T} tokens, 1 thread, median ms")
    print(f"{'policy':8} {'ctg':>10} {'pytorch':>10} {'pytorch/ctg':>12}")
    for name, mm in (("f32", None), ("bf16", torch.bfloat16)):
        t = torch_step_ms(mm)
        c = ctg_ms[name]
        print(f"{name:8} {c:10.2f} {t:10.2f} {t / c:12.2f}")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
