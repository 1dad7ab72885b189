"""Train ctg::nn::transformer's PyTorch twin for a few steps and save it as
safetensors; examples/from_torch.cpp loads it into ctg and continues training.

    /usr/bin/python3 examples/from_torch.py model.safetensors     # Debian's python3-torch
    build/default/examples/from_torch model.safetensors

The model is written the way a PyTorch user writes it (nn.Linear, nn.Embedding,
a ModuleList of blocks); ctg::io::torch_transformer_map() maps its state_dict
names and layouts onto ctg's leaves. The task: sequences that count up from a
random start with a random stride (1, 2 or 3) modulo the vocabulary, so the next
token is predictable from the two before it. Both programs print the loss on
the same fixed evaluation batch (eval_batch): ctg's first one equals PyTorch's last.

The file is written with the `safetensors` package when it is importable, else by
save_safetensors below (a few lines that follow the format's spec).
"""
import json
import math
import struct
import sys

import torch
from torch import nn

F = nn.functional


class Config:
    """Keep in sync with `config` in from_torch.cpp."""
    vocab, max_seq, dim, heads, head_dim, hidden, layers = 16, 16, 32, 2, 16, 64, 2

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, c, fused_qkv):
        super().__init__()
        self.c, self.fused = c, fused_qkv
        inner = c.heads * c.head_dim
        if fused_qkv:
            self.wqkv = nn.Linear(c.dim, 3 * inner, bias=False)
        else:
            self.wq, self.wk, self.wv = (nn.Linear(c.dim, inner, bias=False) for _ in range(3))
        self.wo = nn.Linear(inner, c.dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        c = self.c
        qkv = self.wqkv(x).chunk(3, dim=-1) if self.fused else (self.wq(x), self.wk(x), self.wv(x))
        q, k, v = (y.view(b, t, c.heads, c.head_dim).transpose(1, 2) for y in qkv)
        scores = q @ k.transpose(-2, -1) / math.sqrt(c.head_dim)
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        out = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, c.heads * c.head_dim)
        return self.wo(out)


class SwiGLU(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c.dim, c.hidden, bias=False)
        self.w3 = nn.Linear(c.dim, c.hidden, bias=False)
        self.w2 = nn.Linear(c.hidden, c.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c, fused_qkv):
        super().__init__()
        self.ln1, self.attn = RMSNorm(c.dim), Attention(c, fused_qkv)
        self.ln2, self.mlp = RMSNorm(c.dim), SwiGLU(c)

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        return h + self.mlp(self.ln2(h))


class Transformer(nn.Module):
    def __init__(self, c=Config(), fused_qkv=False):
        super().__init__()
        self.tok = nn.Embedding(c.vocab, c.dim)
        self.pos = nn.Embedding(c.max_seq, c.dim)
        self.layers = nn.ModuleList(Block(c, fused_qkv) for _ in range(c.layers))
        self.ln_f = RMSNorm(c.dim)
        self.lm_head = nn.Linear(c.dim, c.vocab, bias=False)

    def forward(self, ids, targets):
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.layers:
            h = block(h)
        logits = self.lm_head(self.ln_f(h))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(), ignore_index=-100)


def counting_batch(starts, strides, c=Config()):
    """ids [b, max_seq] counting from each start by its stride (mod vocab); targets: the next token."""
    t = torch.arange(c.max_seq + 1)
    seq = (torch.tensor(starts)[:, None] + torch.tensor(strides)[:, None] * t) % c.vocab
    return seq[:, :-1].int(), seq[:, 1:].int()


def eval_batch(c=Config()):
    """8 fixed sequences (the same in from_torch.cpp)."""
    return counting_batch([(5 * b) % c.vocab for b in range(8)], [1 + b % 3 for b in range(8)], c)


def save_safetensors(tensors, path, metadata=None):
    """{name: tensor} -> path, following the format's spec: an 8-byte little-endian
    header length, the JSON header, then each tensor's little-endian bytes."""
    codes = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16",
             torch.int32: "I32", torch.uint8: "U8"}
    header, data, at = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        dtype = getattr(t, "st_dtype", codes[t.dtype])  # a uint8 tensor may carry F8_E4M3 / F8_E5M2 bytes
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        data.append(raw)
        at += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(data))


def save(tensors, path, metadata=None):
    """With the safetensors package when it is installed, else the few lines above.
    Returns which one wrote the file."""
    try:
        from safetensors.torch import save_file
    except ImportError:
        save_safetensors(tensors, path, metadata)
        return "save_safetensors (examples/from_torch.py, from the format's spec)"
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=metadata)
    return "the safetensors package (safetensors.torch.save_file)"


def main(path, steps=60, seed=0):
    torch.manual_seed(seed)
    c = Config()
    model = Transformer(c)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps):
        starts = torch.randint(0, c.vocab, (16,), generator=gen).tolist()
        strides = torch.randint(1, 4, (16,), generator=gen).tolist()
        loss = model(*counting_batch(starts, strides, c))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"torch step {step:4d}  loss {loss.item():.4f}")
    with torch.no_grad():
        print(f"torch: eval loss after {steps} steps {model(*eval_batch(c)).item():.6f}")
    print("written by", save(model.state_dict(), path, {"format": "pt"}), "to", path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "model.safetensors")
