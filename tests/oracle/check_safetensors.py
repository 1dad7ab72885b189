"""safetensors between ctg and another implementation, and the first loss after
loading against PyTorch's (ctg's side: safetensors_tool.cpp).

Who writes the files ctg reads: the model files, the `safetensors` package
(safetensors.torch.save_file) when this interpreter can import it, else
save_safetensors in examples/from_torch.py (a few lines that follow the format's
spec; its JSON differs from ctg's writer: spaces after separators,
"__metadata__" last); the output says which ran. The every-dtype file is always
written by the spec writer, as torch 1.13 has no float8 dtypes for the package
to write (its F8 tensors are raw bytes). ctg's files are read back with the
package when importable, and always by the few lines of read_raw below.

  dtypes  every ctg dtype (F32 BF16 F16 F64 F8_E4M3 F8_E5M2) and PyTorch layout (an
          nn.Linear weight; q, k, v in one nn.Linear split by heads; an output
          projection; per layer), loaded by ctg and written back: with the same map
          the tensors and metadata come back bitwise; with ctg's own names each leaf
          equals the PyTorch tensor rearranged by torch's own view/permute (so the
          layouts are checked apart from ctg's index arithmetic).
  model   ctg::nn::transformer's PyTorch twin (examples/from_torch.py: nn.Module
          written as a PyTorch user writes it) with random weights, q/k/v separate
          and fused: ctg's loss on a batch right after loading equals the module's
          loss in float64 on the same weights within the f32 "model" row of
          tolerances.py (rtol 1e-5 + 6 sqrt(200) u_f32); saving back gives the
          state_dict bitwise; a file for the other attention style is rejected.

    /usr/bin/python3 check_safetensors.py --tool <oracle_safetensors_tool> --dir <scratch dir>
"""
import argparse
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
import oracle  # noqa: E402

torch = oracle.require_torch()
import tolerances  # noqa: E402
import from_torch as ft  # noqa: E402

TORCH_DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16,
                "I32": torch.int32, "F8_E4M3": torch.uint8, "F8_E5M2": torch.uint8}
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def read_raw(path):
    """({name: tensor}, {name: dtype}, metadata) of a safetensors file, following the spec."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = b[8 + n:]
    tensors, dtypes = {}, {}
    for name, h in header.items():
        begin, end = h["data_offsets"]
        raw = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.uint8) if end > begin else torch.zeros(0, dtype=torch.uint8)
        tensors[name] = raw.view(TORCH_DTYPES[h["dtype"]]).reshape(h["shape"])
        dtypes[name] = h["dtype"]
    return tensors, dtypes, meta


def read_back(path):
    """ctg's output through the package if importable (also returned: who read it), else read_raw."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        return read_raw(path)[0], "read_raw (the spec)"
    return load_file(path), "the safetensors package"


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().view(-1).view(torch.uint8),
                                                                     b.contiguous().view(-1).view(torch.uint8))


def tool(args, *rest):
    return subprocess.run([args.tool, *rest], capture_output=True, text=True)


def dtypes_case(args):
    g = torch.Generator().manual_seed(5)

    def rnd(*shape, dtype=torch.float32):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * 3).to(dtype)

    def raw8(n, kind):
        t = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
        t.st_dtype = kind
        return t

    src = {}
    for k in (0, 1):
        src[f"layers.{k}.qkv.weight"] = rnd(24, 3)   # nn.Linear(3, 3 * 2 * 4): q, k, v, 2 heads of 4
        src[f"layers.{k}.o.weight"] = rnd(3, 8)      # nn.Linear(2 * 4, 3)
    src.update({"e5": raw8(6, "F8_E5M2"), "d": rnd(2, 2, dtype=torch.float64), "renamed.c": rnd(4, dtype=torch.float16),
                "b.weight": rnd(5, 3, dtype=torch.bfloat16), "a": rnd(2, 3), "e4": raw8(6, "F8_E4M3")})
    meta = {"format": "pt", "note": "\u00fc \" \\ \n \U0001F600"}
    path, out_torch, out_ctg = (os.path.join(args.dir, n) for n in ("st_dtypes.safetensors", "st_dtypes_torch.safetensors",
                                                                      "st_dtypes_ctg.safetensors"))
    ft.save_safetensors(src, path, meta)
    r = tool(args, "dtypes", path, out_torch, out_ctg)
    check(r.returncode == 0, f"dtypes: ctg loads a file of every dtype written by the spec writer {r.stderr.strip()}")
    if r.returncode:
        return
    back, back_dtypes, back_meta = read_raw(out_torch)
    check(back_meta == meta, "dtypes: metadata written back unchanged")
    check(set(back) == set(src), f"dtypes: the same tensors written back ({sorted(back)})")
    for name, t in src.items():
        want = getattr(t, "st_dtype", None) or next(k for k, v in TORCH_DTYPES.items() if v == t.dtype)
        check(name in back and back_dtypes[name] == want and same(back[name], t), f"dtypes: {name} ({want}) written back bitwise")

    ctg, _, _ = read_raw(out_ctg)
    heads, dh, d = 2, 4, 3
    expect = {"a": src["a"], "b.weight": src["b.weight"].t(), "c": src["renamed.c"], "d": src["d"],
              "e4": src["e4"], "e5": src["e5"]}
    for p, leaf in enumerate(("wq", "wk", "wv")):  # rows p*H*Dh.. of nn.Linear's [out, in], out split as (H, Dh)
        expect[f"layers.{{i}}.{leaf}"] = torch.stack([
            src[f"layers.{k}.qkv.weight"][p * heads * dh:(p + 1) * heads * dh].view(heads, dh, d).permute(0, 2, 1)
            for k in (0, 1)])
    expect["layers.{i}.wo"] = torch.stack([src[f"layers.{k}.o.weight"].view(d, heads, dh).permute(1, 2, 0) for k in (0, 1)])
    check(set(ctg) == set(expect), f"dtypes: ctg's own names ({sorted(ctg)})")
    for name, t in expect.items():
        check(name in ctg and same(ctg[name], t.contiguous()), f"dtypes: ctg's leaf {name} {list(t.shape)} is PyTorch's, rearranged")


IDS = [3, 7, 3, 1, 0, 7, 7, 2, 10, 3, 3, 8, 1, 4, 6, 1, 2, 2, 7, 0, 3, 1, 8, 4]  # model_dump.cpp's batch
TARGETS = [7, 3, 1, -100, 7, 7, 2, 6, 3, 3, 8, 1, 4, -100, 1, 0, 2, 7, 0, 3, 1, 8, 4, -100]


def model_case(args):
    c = ft.Config(vocab=11, max_seq=8, dim=16, heads=2, head_dim=8, hidden=24, layers=2)  # safetensors_tool's tiny
    ids = torch.tensor(IDS, dtype=torch.int32).view(3, 8)
    targets = torch.tensor(TARGETS, dtype=torch.int32).view(3, 8)
    batch = os.path.join(args.dir, "st_batch.safetensors")
    ft.save({"ids": ids, "targets": targets}, batch)
    tol = tolerances.for_tag("f32", "model")
    files = {}
    for style in ("separate", "fused"):
        g = torch.Generator().manual_seed(11)
        m = ft.Transformer(c, fused_qkv=style == "fused")
        with torch.no_grad():  # every parameter random (norm gains around 1), so a swapped or missed one shows
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
        state = {k: v.detach().clone() for k, v in m.state_dict().items()}
        weights = files[style] = os.path.join(args.dir, f"st_model_{style}.safetensors")
        out = os.path.join(args.dir, f"st_model_{style}_ctg.safetensors")
        who = ft.save(state, weights, {"format": "pt"})
        r = tool(args, "model", weights, batch, out, style)
        check(r.returncode == 0 and r.stdout.startswith("loss "),
              f"model ({style} q/k/v): ctg loads the state_dict written by {who} {r.stderr.strip()}")
        if r.returncode:
            continue
        got = float(r.stdout.split()[1])
        with torch.no_grad():
            f32 = m(ids, targets).item()
            ref = m.double()(ids, targets).item()
        allowed = tol.allowed(torch.tensor(ref, dtype=torch.float64), abs(ref)).item()
        check(abs(got - ref) <= allowed,
              f"model ({style} q/k/v): ctg's first loss {got:.9g} vs PyTorch (float64) {ref:.9g}: "
              f"|diff| {abs(got - ref):.2e} <= {allowed:.2e} (f32 model row; PyTorch float32 gives {f32:.9g})")
        back, reader = read_back(out)
        check(set(back) == set(state) and all(same(back[k], v) for k, v in state.items()),
              f"model ({style} q/k/v): ctg's file, read by {reader}, is the state_dict bitwise")
    r = tool(args, "model", files["separate"], batch, os.path.join(args.dir, "st_unused.safetensors"), "fused")
    want = ("ctg: safetensors file '" + files["separate"] + "': tensor 'layers.0.attn.wqkv.weight' for leaf "
            "'layers.{i}.attn.wv' (layer 0): expected F32 [48, 16], found no such tensor")
    check(r.returncode == 1 and r.stderr.strip() == want, f"model: separate q/k/v loaded as fused is rejected: {r.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool", required=True)
    ap.add_argument("--dir", required=True)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    dtypes_case(args)
    model_case(args)
    print(f"{len(failures)} failure(s)" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
