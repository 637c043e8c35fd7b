#!/usr/bin/env python3
"""Float64 reference forward pass of a GGUF (no activation quantization,
weights dequantized exactly), used to judge how far Trellis and llama.cpp
each are from exact arithmetic. Architectures: llama, qwen2, qwen3, gemma3.

    /path/to/venv-with-gguf-numpy/bin/python scripts/ref/numpy_forward.py \
        MODEL REF.json CASE OUT.f64

Writes the last prompt token's logits (float64) of case CASE of REF.json
("cases"[CASE]["prompt_ids"]). The checked-in exact_*.f32 files were made
with the `gguf` and `numpy` PyPI packages in a venv, then rounded to
float32, e.g. for SmolLM2:

    for c in $(seq 0 11); do
      python scripts/ref/numpy_forward.py MODEL tests/data/model/smollm2_ref.json $c /tmp/e.f64
      python3 -c "import array; a=array.array('d'); a.frombytes(open('/tmp/e.f64','rb').read()); array.array('f', a).tofile(open('tests/data/model/exact_$c.f32','wb'))"
    done

(scripts/ref/make_model_ref.py does this itself for the other models.)
"""
import json, sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def forward(path, ids, cache=None):
    """Logits (float64) of the last of ids. cache: a dict kept between
    calls on the same file (dequantized weights are reused)."""
    if cache is None:
        cache = {}
    if cache.get("path") != path:
        cache.clear()
        cache["path"] = path
        cache["reader"] = GGUFReader(path)
    r = cache["reader"]
    T = {t.name: t for t in r.tensors}

    def W(name):
        if name not in cache:
            t = T[name]
            cache[name] = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
                [int(x) for x in reversed(t.shape)])
        return cache[name]

    def f(k, default=None):
        if k not in r.fields:
            if default is None:
                raise KeyError(k)
            return default
        return r.fields[k].parts[r.fields[k].data[0]][0]

    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    A = arch + "."
    L, dim = int(f(A + "block_count")), int(f(A + "embedding_length"))
    H = int(f(A + "attention.head_count"))
    KV = int(f(A + "attention.head_count_kv", H))
    eps = float(f(A + "attention.layer_norm_rms_epsilon"))
    base = float(f(A + "rope.freq_base", 10000.0))
    hd = int(f(A + "attention.key_length", dim // H))
    neox = arch in ("qwen2", "qwen3", "gemma3")
    n = len(ids)
    emb = W("token_embd.weight")
    x = emb[ids]
    swa = [False] * L
    base_l = [base] * L
    attn_scale = 1 / np.sqrt(hd)
    if arch == "gemma3":
        x = x * np.sqrt(dim)
        n_swa = int(f(A + "attention.sliding_window", 0))
        if n_swa:
            pat = int(f(A + "attention.sliding_window_pattern", 6))
            swa = [pat == 0 or (l % pat < pat - 1) for l in range(L)]
            bswa = float(f(A + "rope.freq_base_swa", 10000.0))
            base_l = [bswa if swa[l] else base for l in range(L)]
        softcap = float(f(A + "final_logit_softcapping", 0.0))
    else:
        n_swa, softcap = 0, 0.0

    def rms(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    def rms_heads(v, nh, w):
        return rms(v.reshape(n, nh, hd), w).reshape(n, nh * hd)

    pos = np.arange(n)[:, None]

    def rope(v, nh, b):
        inv = b ** (-np.arange(0, hd, 2) / hd)
        ang = pos * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if neox:
            v = v.reshape(n, nh, hd)
            a, bb = v[..., :hd // 2], v[..., hd // 2:]
            return np.concatenate([a * c - bb * s, a * s + bb * c], -1).reshape(n, nh * hd)
        v = v.reshape(n, nh, hd // 2, 2)
        a, bb = v[..., 0], v[..., 1]
        return np.stack([a * c - bb * s, a * s + bb * c], -1).reshape(n, nh * hd)

    def gelu(g):
        return 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))

    for l in range(L):
        p = f"blk.{l}."
        h = rms(x, W(p + "attn_norm.weight"))
        q, k, v = (h @ W(p + s + ".weight").T for s in ("attn_q", "attn_k", "attn_v"))
        if p + "attn_q.bias" in T:
            q, k, v = q + W(p + "attn_q.bias"), k + W(p + "attn_k.bias"), v + W(p + "attn_v.bias")
        if p + "attn_q_norm.weight" in T:
            q = rms_heads(q, H, W(p + "attn_q_norm.weight"))
            k = rms_heads(k, KV, W(p + "attn_k_norm.weight"))
        q, k = rope(q, H, base_l[l]), rope(k, KV, base_l[l])
        mask = np.triu(np.full((n, n), -np.inf), 1)
        if swa[l]:
            mask = mask + np.tril(np.full((n, n), -np.inf), -n_swa)
        att = np.zeros((n, H * hd))
        for hh in range(H):
            kh = hh // (H // KV)
            qs, ks, vs = (m[:, i * hd:(i + 1) * hd] for m, i in ((q, hh), (k, kh), (v, kh)))
            sc = qs @ ks.T * attn_scale + mask
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            att[:, hh * hd:(hh + 1) * hd] = sc @ vs
        o = att @ W(p + "attn_output.weight").T
        if arch == "gemma3":
            o = rms(o, W(p + "post_attention_norm.weight"))
        x = x + o
        h = rms(x, W(p + "ffn_norm.weight"))
        g, u = h @ W(p + "ffn_gate.weight").T, h @ W(p + "ffn_up.weight").T
        act = gelu(g) if arch == "gemma3" else g / (1 + np.exp(-g))
        o = (act * u) @ W(p + "ffn_down.weight").T
        if arch == "gemma3":
            o = rms(o, W(p + "post_ffw_norm.weight"))
        x = x + o
    h = rms(x[-1:], W("output_norm.weight"))
    out = W("output.weight") if "output.weight" in T else emb
    logits = (h @ out.T)[0]
    if softcap:
        logits = np.tanh(logits / softcap) * softcap
    return logits.astype(np.float64)


def main():
    path, ref, case, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    ids = json.load(open(ref))["cases"][case]["prompt_ids"]
    forward(path, ids).tofile(out)


if __name__ == "__main__":
    main()
