#!/usr/bin/env python3
"""Float64 reference forward pass of a llama GGUF (no activation
quantization, weights dequantized exactly), used to judge how far Trellis
and llama.cpp each are from exact arithmetic.

    /path/to/venv-with-gguf-numpy/bin/python scripts/ref/numpy_forward.py \
        MODEL tests/data/model/smollm2_ref.json CASE OUT.f64

Writes the last prompt token's logits (float64) of case CASE. The
checked-in tests/data/model/exact_C.f32 (C = 0..11) were made with the
`gguf` and `numpy` PyPI packages in a venv, then rounded to float32:

    for c in $(seq 0 11); do
      python scripts/ref/numpy_forward.py MODEL tests/data/model/smollm2_ref.json $c /tmp/e.f64
      python3 -c "import array; a=array.array('d'); a.frombytes(open('/tmp/e.f64','rb').read()); array.array('f', a).tofile(open('tests/data/model/exact_$c.f32','wb'))"
    done
"""
import json, sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

def main():
    path, ref, case, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    r = GGUFReader(path)
    T = {t.name: t for t in r.tensors}
    def W(name):
        t = T[name]
        return dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(x) for x in reversed(t.shape)])
    f = lambda k: r.fields[k].parts[r.fields[k].data[0]][0]
    L, dim, H, KV = int(f("llama.block_count")), int(f("llama.embedding_length")), int(f("llama.attention.head_count")), int(f("llama.attention.head_count_kv"))
    eps, base = float(f("llama.attention.layer_norm_rms_epsilon")), float(f("llama.rope.freq_base"))
    hd = dim // H
    ids = json.load(open(ref))["cases"][case]["prompt_ids"]
    n = len(ids)
    emb = W("token_embd.weight")
    x = emb[ids]
    def rms(x, w): return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
    pos = np.arange(n)[:, None]
    inv = base ** (-np.arange(0, hd, 2) / hd)
    ang = pos * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    def rope(v, nh):
        v = v.reshape(n, nh, hd // 2, 2)
        a, b = v[..., 0], v[..., 1]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.stack([a * c - b * s, a * s + b * c], -1).reshape(n, nh * hd)
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(L):
        p = f"blk.{l}."
        h = rms(x, W(p + "attn_norm.weight"))
        q = rope(h @ W(p + "attn_q.weight").T, H)
        k = rope(h @ W(p + "attn_k.weight").T, KV)
        v = h @ W(p + "attn_v.weight").T
        att = np.zeros((n, dim))
        for hh in range(H):
            kh = hh // (H // KV)
            qs = q[:, hh * hd:(hh + 1) * hd]; ks = k[:, kh * hd:(kh + 1) * hd]; vs = v[:, kh * hd:(kh + 1) * hd]
            sc = qs @ ks.T / np.sqrt(hd) + mask
            sc = np.exp(sc - sc.max(-1, keepdims=True)); sc /= sc.sum(-1, keepdims=True)
            att[:, hh * hd:(hh + 1) * hd] = sc @ vs
        x = x + att @ W(p + "attn_output.weight").T
        h = rms(x, W(p + "ffn_norm.weight"))
        g = h @ W(p + "ffn_gate.weight").T; u = h @ W(p + "ffn_up.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ W(p + "ffn_down.weight").T
    h = rms(x[-1:], W("output_norm.weight"))
    (h @ emb.T)[0].astype(np.float64).tofile(out)

if __name__ == "__main__":
    main()
