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

Sizes and the PyTorch model: bench/torch_transformer.py (tiny: vocab 96,
2 layers of width 64, batch 8 x 64; realistic: vocab 256, 4 layers of width
256, batch 8 x 128). ctg runs its library default (nn::transformer's
recompute policy) and, as a second line, the other policy.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

BENCH = {"tiny": ("bench_tiny_lm_step", "tiny_lm_step"), "realistic": ("bench_realistic_lm_step", "realistic_lm_step")}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(BENCH), default="tiny")
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_transformer import SIZES, TorchStep  # noqa: E402

torch.set_num_threads(ARGS.threads)
S = SIZES[ARGS.size]


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
    steps = {(pol, name): TorchStep(S, mm, compiled) for pol, mm in policies for name, compiled in peers}
    ctg_ms, torch_ms = {}, {}
    for r in range(ARGS.rounds):
        for name, ms in ctg_round(exe, prefix).items():
            ctg_ms.setdefault(name, []).append(ms)
        for key, st in steps.items():
            torch_ms.setdefault(key, []).append(st.median_ms(iters))
        print(f"  round {r + 1}/{ARGS.rounds} done", file=sys.stderr)
    print(f"{ARGS.size} transformer, one training step, batch {S['B']} x {S['T']} tokens, {ARGS.threads} thread(s) "
          f"on both sides, {ARGS.rounds} alternating rounds; ms per step, range of the rounds' medians")
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
