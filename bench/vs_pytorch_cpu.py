#!/usr/bin/python3
"""One training step of a transformer, ctg vs PyTorch, on the CPU: the same
model, batch and thread count on both sides, measured in alternating rounds
(ctg, PyTorch eager, [PyTorch compiled], ctg, ...) so that a machine shared
with other work slows both alike; prints each side's per-round medians as a
range, and the ratio of the medians of those.

    python3 bench/vs_pytorch_cpu.py [--size tiny|realistic] [--threads N] [--rounds R]
                                    [--compile] [--bench-dir build/default/bench]

Run it with the Python whose PyTorch is the peer: /usr/bin/python3 for
Debian's (python3-torch), or a virtual environment's python for PyTorch 2.x
from PyPI (--compile adds torch.compile; it needs PyTorch 2 and a C++ compiler).

Refuses to compare (exit 2) when PyTorch's BLAS is the reference one: Debian's
PyTorch is built with BLAS_INFO=generic and calls whatever libblas.so.3 is,
which is netlib's reference BLAS (10x slower than OpenBLAS) until
libopenblas0-pthread is installed (scripts/lib/deps.sh installs it).

Sizes (keep in sync with bench/tiny_lm_step.cpp and bench/realistic_lm_step.cpp):
  tiny:      vocab 96,  max_seq 64,  dim 64,  4 heads of 16, SwiGLU 172, 2 layers, batch 8 x 64
  realistic: vocab 256, max_seq 128, dim 256, 8 heads of 32, SwiGLU 688, 4 layers, batch 8 x 128
Pre-norm blocks (RMSNorm), learned positions, untied head, causal attention;
AdamW (wd 0.1) with global-norm clipping at 1.0. bf16 = f32 master weights,
bf16 matmuls, f32 norms / softmax / loss (ctg's autocast<bf16>, written as
explicit casts). ctg runs its library default (nn::transformer's recompute
policy) and, as a second line, the other policy.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

SIZES = {
    # V, MAXT, D, H, DH, HID, LAYERS, B, T
    "tiny": dict(V=96, MAXT=64, D=64, H=4, DH=16, HID=172, LAYERS=2, B=8, T=64),
    "realistic": dict(V=256, MAXT=128, D=256, H=8, DH=32, HID=688, LAYERS=4, B=8, T=128),
}
BENCH = {"tiny": ("bench_tiny_lm_step", "tiny_lm_step"), "realistic": ("bench_realistic_lm_step", "realistic_lm_step")}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--threads", type=int, default=1, help="threads on both sides (default 1)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--iters", type=int, default=0, help="PyTorch steps per round (default: 20 tiny, 5 realistic)")
    ap.add_argument("--compile", action="store_true", help="also torch.compile (PyTorch 2.x)")
    ap.add_argument("--bench-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                        "default", "bench"))
    return ap.parse_args()


ARGS = parse_args()
# Thread counts are fixed before PyTorch (and its BLAS) start.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(ARGS.threads)
S = SIZES[ARGS.size]
V, MAXT, D, H, DH, HID, LAYERS, B, T = (S[k] for k in ("V", "MAXT", "D", "H", "DH", "HID", "LAYERS", "B", "T"))


def blas_in_use():
    """(name, ok): the BLAS PyTorch's matmuls run on, and whether it is a real one."""
    cfg = torch.__config__.show()
    info = next((w.split("=", 1)[1].rstrip(",") for w in cfg.split() if w.startswith("BLAS_INFO=")), "?")
    if info != "generic":
        return f"BLAS_INFO={info}", True
    # generic: the libblas.so.3 this process loaded (after a product that needs it).
    a = torch.ones(64, 64)
    (a @ a).sum().item()
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "blas" in os.path.basename(path).lower():
                libs.add(os.path.realpath(path))
    real = [p for p in libs if "openblas" in p or "blis" in p or "mkl" in p or "atlas" in p]
    if real:
        return f"BLAS_INFO=generic, libblas.so.3 -> {sorted(real)[0]}", True
    return f"BLAS_INFO=generic, libblas.so.3 -> {', '.join(sorted(libs)) or 'none loaded'} (reference BLAS)", False


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


class TorchStep:
    def __init__(self, mm, compiled):
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(1)
        self.p = make_params(gen)
        self.opt = torch.optim.AdamW(self.p.values(), lr=1e-3, weight_decay=0.1)
        i = torch.arange(B * T)
        self.ids, self.targets = ((i * 7 + 3) % V).reshape(B, T), ((i * 7 + 10) % V).reshape(B, T)
        self.pos = torch.arange(T)
        self.mm = mm
        self.loss = torch.compile(loss_fn) if compiled else loss_fn
        for _ in range(3):  # warm-up (and compilation)
            self.step()

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(self.p, self.ids, self.pos, self.targets, self.mm)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.p.values(), 1.0)
        self.opt.step()

    def median_ms(self, iters):
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            self.step()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def ctg_round(exe, prefix):
    """One run of the ctg benchmark: {variant: median ms} for this thread count."""
    flt = f"^{prefix}/(f32|bf16)(/ckpt_none)?/threads:{ARGS.threads}/"
    out = subprocess.run([exe, f"--benchmark_filter={flt}", "--benchmark_format=json", "--benchmark_repetitions=3",
                          "--benchmark_report_aggregates_only=true"], check=True, capture_output=True, text=True)
    ms = {}
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            # "<prefix>/<policy>[/ckpt_none]/threads:N[/iterations:n]/real_time" -> "<policy>[/ckpt_none]"
            name = b["run_name"].split("/threads:")[0].split("/", 1)[1]
            ms[name] = b["real_time"]
    return ms


def span(values):
    lo, hi = min(values), max(values)
    return f"{lo:.1f}" if abs(hi - lo) < 0.05 else f"{lo:.1f}-{hi:.1f}"


def main():
    blas, ok = blas_in_use()
    print(f"PyTorch {torch.__version__}: {blas}")
    if not ok:
        print("refusing to compare: PyTorch runs on the reference BLAS, not PyTorch at its best. Install "
              "libopenblas0-pthread (scripts/lib/deps.sh does), or use a PyTorch with its own BLAS.", file=sys.stderr)
        return 2
    if ARGS.compile and not hasattr(torch, "compile"):
        print("--compile needs PyTorch 2", file=sys.stderr)
        return 2
    exe_name, prefix = BENCH[ARGS.size]
    exe = os.path.join(ARGS.bench_dir, exe_name)
    iters = ARGS.iters or (20 if ARGS.size == "tiny" else 5)
    peers = [("eager", False)] + ([("compile", True)] if ARGS.compile else [])
    policies = (("f32", None), ("bf16", torch.bfloat16))
    steps = {(pol, name): TorchStep(mm, compiled) for pol, mm in policies for name, compiled in peers}
    ctg_ms, torch_ms = {}, {}
    for r in range(ARGS.rounds):
        for name, ms in ctg_round(exe, prefix).items():
            ctg_ms.setdefault(name, []).append(ms)
        for key, st in steps.items():
            torch_ms.setdefault(key, []).append(st.median_ms(iters))
        print(f"  round {r + 1}/{ARGS.rounds} done", file=sys.stderr)
    print(f"{ARGS.size} transformer, one training step, batch {B} x {T} tokens, {ARGS.threads} thread(s) on both "
          f"sides, {ARGS.rounds} alternating rounds; ms per step, range of the rounds' medians")
    head = f"{'policy':18} {'ctg':>13}"
    for name, _ in peers:
        head += f" {'torch ' + name:>15} {name + '/ctg':>12}"
    print(head)
    for pol, _ in policies:
        for variant in (pol, pol + "/ckpt_none"):
            if variant not in ctg_ms:
                continue
            c = statistics.median(ctg_ms[variant])
            line = f"{variant:18} {span(ctg_ms[variant]):>13}"
            for name, _ in peers:
                t = statistics.median(torch_ms[(pol, name)])
                line += f" {span(torch_ms[(pol, name)]):>15} {t / c:12.2f}"
            print(line)
    print(f"(ratio > 1: ctg faster; torch threads {torch.get_num_threads()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
