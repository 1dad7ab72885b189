"""Tensor bundles: the oracle's exchange format (the C++ side is bundle.hpp).

Layout (every integer little-endian, no padding):
    magic "CTGB", u32 version (1), u32 count, then count records:
    u32 name_len, name (UTF-8), u32 dtype, u32 rank, rank x i64 dims,
    numel x itemsize bytes of row-major little-endian data.
dtype codes: 1 f32, 2 f64, 3 bf16, 4 f16, 5 i32. bf16 is stored as its 16-bit
pattern; here it becomes a torch.bfloat16 tensor (a view of the int16 bits).

    read(path)            -> dict name -> torch.Tensor (file order, native dtype)
    write(path, tensors)  tensors: dict name -> torch.Tensor (f32/f64/bf16/f16/i32)
"""
import struct

import numpy as np
import torch

MAGIC = b"CTGB"
VERSION = 1
MAX_RANK = 8

# code -> (name, numpy little-endian dtype of the stored elements, torch dtype)
CODES = {
    1: ("f32", np.dtype("<f4"), torch.float32),
    2: ("f64", np.dtype("<f8"), torch.float64),
    3: ("bf16", np.dtype("<i2"), torch.bfloat16),  # the bits, viewed as bfloat16
    4: ("f16", np.dtype("<f2"), torch.float16),
    5: ("i32", np.dtype("<i4"), torch.int32),
}
CODE_OF = {tdt: code for code, (_, _, tdt) in CODES.items()}
NAME_OF = {tdt: name for _, (name, _, tdt) in CODES.items()}


class BundleError(Exception):
    pass


def dtype_name(t):
    """'f32', 'bf16', ... for a tensor of a bundle dtype."""
    return NAME_OF[t.dtype]


def read(path):
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(n):
        nonlocal pos
        if n > len(buf) - pos:
            raise BundleError(f"{path}: truncated file")
        b = buf[pos:pos + n]
        pos += n
        return b

    def u32():
        return struct.unpack("<I", take(4))[0]

    if take(4) != MAGIC:
        raise BundleError(f"{path}: not a tensor bundle")
    version = u32()
    if version != VERSION:
        raise BundleError(f"{path}: unsupported version {version}")
    out = {}
    for _ in range(u32()):
        name = take(u32()).decode("utf-8")
        code = u32()
        if code not in CODES:
            raise BundleError(f"{path}: tensor '{name}' has unknown dtype code {code}")
        rank = u32()
        if rank > MAX_RANK:
            raise BundleError(f"{path}: tensor '{name}' has rank {rank} > {MAX_RANK}")
        dims = list(struct.unpack(f"<{rank}q", take(8 * rank)))
        if any(d < 0 for d in dims):
            raise BundleError(f"{path}: tensor '{name}' has a negative dim")
        _, npdt, tdt = CODES[code]
        numel = int(np.prod(dims, dtype=np.int64)) if dims else 1
        arr = np.frombuffer(take(numel * npdt.itemsize), dtype=npdt).astype(npdt.newbyteorder("="))
        t = torch.from_numpy(arr.copy()).reshape(dims)
        if tdt == torch.bfloat16:
            t = t.view(torch.bfloat16)
        if name in out:
            raise BundleError(f"{path}: two tensors named '{name}'")
        out[name] = t
    if pos != len(buf):
        raise BundleError(f"{path}: trailing bytes after the last record")
    return out


def write(path, tensors):
    parts = [MAGIC, struct.pack("<II", VERSION, len(tensors))]
    for name, t in tensors.items():
        if t.dtype not in CODE_OF:
            raise BundleError(f"tensor '{name}': dtype {t.dtype} has no bundle code")
        if t.dim() > MAX_RANK:
            raise BundleError(f"tensor '{name}': rank {t.dim()} > {MAX_RANK}")
        code = CODE_OF[t.dtype]
        _, npdt, _ = CODES[code]
        t = t.detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        data = t.numpy().astype(npdt, copy=False).tobytes(order="C")
        nb = name.encode("utf-8")
        parts.append(struct.pack("<I", len(nb)) + nb)
        parts.append(struct.pack(f"<II{t.dim()}q", code, t.dim(), *t.shape))
        parts.append(data)
    with open(path, "wb") as f:
        f.write(b"".join(parts))
