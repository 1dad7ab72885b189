"""The bundle format itself (bundle.py <-> bundle.hpp): Python writes a bundle with
every dtype (bf16 and f16 special values included, rank 0 to 6, an empty tensor),
oracle_bundle_tool decodes each tensor into its C++ type and writes it back, and
Python checks the round trip is bit-exact. Malformed files must be rejected by both.

    /usr/bin/python3 check_bundle.py --tool <oracle_bundle_tool> --dir <scratch dir>
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

torch = oracle.require_torch()
import bundle  # noqa: E402


def bits(t):
    """A tensor's bit patterns, for exact comparison (NaN payloads included)."""
    view = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16,
            torch.float16: torch.int16, torch.int32: torch.int32}[t.dtype]
    return t.contiguous().view(view)


def sample():
    g = torch.Generator().manual_seed(3)
    special = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"), float("nan"), 1e-40, 3.0e38])
    return {
        "f32/rank2": torch.randn(3, 5, generator=g, dtype=torch.float32),
        "f64/rank1": torch.randn(7, generator=g, dtype=torch.float64),
        "bf16/special": special.to(torch.bfloat16),
        # every bf16 bit pattern, as a [256, 256] tensor
        "bf16/all_patterns": torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
                             .view(torch.bfloat16).reshape(256, 256),
        "f16/special": torch.tensor([0.0, -0.0, 65504.0, 6e-8, float("inf"), float("nan"), -1.5]).to(torch.float16),
        "i32/rank3": torch.arange(-12, 12, dtype=torch.int32).reshape(2, 3, 4),
        "scalar f32": torch.tensor(2.5, dtype=torch.float32),
        "scalar bf16": torch.tensor(-0.3, dtype=torch.bfloat16),
        "rank6": torch.randn(1, 2, 1, 3, 1, 2, generator=g, dtype=torch.float32),
        "empty": torch.zeros(0, 4, dtype=torch.float32),
        "unicode/\u00e9t\u00e9": torch.ones(2, dtype=torch.float64),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--dir", required=True)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    src, dst = os.path.join(args.dir, "roundtrip_in.bundle"), os.path.join(args.dir, "roundtrip_out.bundle")
    failures = []

    want = sample()
    bundle.write(src, want)
    # Python alone
    back = bundle.read(src)
    # through C++
    rc = subprocess.run([args.tool, "copy", src, dst]).returncode
    if rc != 0:
        print(f"FAIL: {args.tool} copy exited with {rc}")
        return 1
    got = bundle.read(dst)
    with open(src, "rb") as a, open(dst, "rb") as b:
        if a.read() != b.read():
            failures.append("the C++ copy is not byte-identical to the Python original")
    for which, res in (("python", back), ("c++", got)):
        if list(res) != list(want):
            failures.append(f"{which}: names/order {list(res)} != {list(want)}")
            continue
        for name, t in want.items():
            r = res[name]
            if r.dtype != t.dtype or tuple(r.shape) != tuple(t.shape):
                failures.append(f"{which}: '{name}' is {r.dtype}{tuple(r.shape)}, wrote {t.dtype}{tuple(t.shape)}")
            elif not torch.equal(bits(r), bits(t)):
                diff = (bits(r) != bits(t)).nonzero()[0].tolist()
                failures.append(f"{which}: '{name}' differs first at index {diff}")
    listing = subprocess.run([args.tool, "list", dst], capture_output=True, text=True)
    if listing.returncode != 0 or "bf16/all_patterns bf16 [256,256]" not in listing.stdout \
            or "scalar f32 f32 []" not in listing.stdout:
        failures.append(f"list output unexpected:\n{listing.stdout}{listing.stderr}")

    # malformed files: truncated, bad magic, trailing bytes
    with open(src, "rb") as f:
        good = f.read()
    bad_files = {"truncated": good[:-3], "bad magic": b"XXXX" + good[4:], "trailing bytes": good + b"\0"}
    for what, data in bad_files.items():
        path = os.path.join(args.dir, "malformed.bundle")
        with open(path, "wb") as f:
            f.write(data)
        try:
            bundle.read(path)
            failures.append(f"python read accepted a {what} file")
        except bundle.BundleError:
            pass
        r = subprocess.run([args.tool, "list", path], capture_output=True, text=True)
        if r.returncode != 1 or "bundle:" not in r.stderr:
            failures.append(f"c++ read of a {what} file: exit {r.returncode}, stderr {r.stderr.strip()!r}")

    for f in failures:
        print("FAIL", f)
    if failures:
        return 1
    print(f"oracle.bundle: {len(want)} tensors round-trip bit-exactly through C++; malformed files rejected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
