#!/usr/bin/python3
"""One training step of a transformer, ctg vs PyTorch, on one GPU: the same
model, batch and optimizer (bench/torch_transformer.py, bench/cuda/step.cu),
bf16 autocast, in the same process order on the same GPU: ctg's steps first
(bench_cuda_step, a separate program), then PyTorch eager and torch.compile.
Prints ms per step and tokens/s for each, and PyTorch's time over ctg's.

    python3 bench/vs_pytorch_gpu.py [--size realistic|gpt2] [--steps N] [--no-compile]
                                    [--bench-dir build/default/bench]

Run it with the Python whose PyTorch (CUDA build) is the peer.
"""
import argparse
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_transformer import SIZES, TorchStep  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=("realistic", "gpt2"), default="gpt2")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true", help="PyTorch eager only")
    ap.add_argument("--bench-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                        "default", "bench"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device for PyTorch: skipped")
        return 77
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
