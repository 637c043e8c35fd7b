#!/usr/bin/env python3
"""Small random-weight GGUFs of the qwen2 and qwen3 architectures, written
with the `gguf` PyPI package (no real Qwen weights are available here).

    python scripts/ref/synth_models.py VOCAB.gguf OUTDIR

writes OUTDIR/qwen2-synth.gguf and OUTDIR/qwen3-synth.gguf. VOCAB.gguf
gives the vocabulary: SmolLM2's byte-level BPE one (49,152 tokens with its
merges), relabelled with the qwen2 pre-tokenizer (the one real Qwen2/3
files name), since no Qwen vocabulary ships with any package used here.

The weights are a pure function of (architecture, tensor index, byte
offset), so tests/unit/test_model_synth.c rebuilds the same tensors in C
(tests/unit/synth_gguf.h) without Python or the vocabulary, and checks
them against the digest recorded here (tensor_hash()). THE RECIPE
BELOW AND synth_gguf.h MUST STAY IN STEP.

Recipe. sm64(x) is SplitMix64's output function applied to
x + 0x9E3779B97F4A7C15. Tensor number t (1-based, in the order of
tensors()) has two streams of 64-bit words: raw_i = sm64(t << 40 | i) and
fld_b = sm64((t | 1 << 20) << 40 | b). The tensor's bytes are raw_0,
raw_1, ... little-endian, cut to its size; then per block b the scale
fields are overwritten with fp16 bit patterns base + (fld_b & 63) (and,
for Q4_K's dmin, base2 + (fld_b >> 8 & 63)), where base is the fp16 bit
pattern of the scale that gives the block's values a standard deviation
of gain / sqrt(cols) (see SCALE_DIV; computed in float64, rounded to
float32, then to fp16). F32 tensors (norms, biases) are
center + ((fld_i & 1023) - 512) / 4096 per element i, exact in float32.

Type mix: like a real Q4_K_M file (Q4_K for most projections, Q6_K for
some V/down and the embedding, Q5_0/Q4_0/Q8_0 for others), varied by layer.

The output projection. Random logits over 49,152 tokens are flat at the
top: with an independent random output.weight, 12% of greedy steps had a
top-2 gap below 0.1, where any two engines' rounding picks differently.
Trained models are confident; to get there with random weights, qwen2's
(untied) output.weight is token_embd with its rows permuted, row
(PERM_A * t + PERM_B) mod n_vocab = embedding row t: the residual stream
keeps the input token's embedding, so the model mostly predicts that
token's successor in the permutation (a bigram model with a varied
output), while every layer still moves the logits. qwen3 ties its output
to the embedding (its greedy output repeats the input token).
"""
import sys
import numpy as np

M64 = (1 << 64) - 1
PERM_A, PERM_B = 7919, 1  # the output permutation (7919 is prime)

# fp16 block scale divisor: the std of (dequantized value / scale) for
# uniformly random quants and scales (Q4_K: with dmin = 7.5 * d)
SCALE_DIV = {"Q8_0": 73.9, "Q4_0": 4.6, "Q5_0": 9.2, "Q4_K": 257.0, "Q6_K": 1367.0}
BLOCK = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q5_0": (32, 22), "Q4_K": (256, 144),
         "Q6_K": (256, 210), "F32": (1, 4)}

ARCHS = {
    "qwen2": dict(n_layers=3, dim=256, n_heads=4, n_kv=2, head_dim=64, ffn=512,
                  rope_base=1000000.0, eps=1e-6, ctx=4096, bias=True, qk_norm=False,
                  tied=False),
    "qwen3": dict(n_layers=3, dim=256, n_heads=4, n_kv=2, head_dim=128, ffn=768,
                  rope_base=1000000.0, eps=1e-6, ctx=4096, bias=False, qk_norm=True,
                  tied=True),
}


def sm64(x):
    z = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(M64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def stream(key, n):
    with np.errstate(over="ignore"):
        return sm64(np.uint64(key << 40) + np.arange(n, dtype=np.uint64))


def fp16_bits(x):
    """x (a float64) rounded to float32, then to fp16 (both to nearest
    even), as the C side does."""
    return int(np.array([np.float32(x)], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def tensors(arch, n_vocab):
    """[(name, type, rows, cols, gain_or_center)] in file order."""
    a = ARCHS[arch]
    d, hd, q_dim, kv_dim = a["dim"], a["head_dim"], a["n_heads"] * a["head_dim"], \
        a["n_kv"] * a["head_dim"]
    # logits = output . normed x, output = the embedding (tied or
    # permuted): gain 4 spreads them (std ~4); the input side is normed
    out = [("token_embd.weight", "Q8_0" if a["tied"] else "Q6_K", n_vocab, d, 4.0)]
    for l in range(a["n_layers"]):
        p = "blk.%d." % l
        odd = l % 2
        out += [(p + "attn_norm.weight", "F32", 1, d, 1.0),
                (p + "attn_q.weight", "Q4_K", q_dim, d, 1.0),
                (p + "attn_k.weight", "Q5_0" if not odd else "Q4_K", kv_dim, d, 1.0),
                (p + "attn_v.weight", "Q6_K" if not odd else "Q8_0", kv_dim, d, 1.0)]
        if a["bias"]:
            out += [(p + "attn_q.bias", "F32", 1, q_dim, 0.0),
                    (p + "attn_k.bias", "F32", 1, kv_dim, 0.0),
                    (p + "attn_v.bias", "F32", 1, kv_dim, 0.0)]
        if a["qk_norm"]:
            out += [(p + "attn_q_norm.weight", "F32", 1, hd, 1.0),
                    (p + "attn_k_norm.weight", "F32", 1, hd, 1.0)]
        out += [(p + "attn_output.weight", "Q4_K", d, q_dim, 1.0),
                (p + "ffn_norm.weight", "F32", 1, d, 1.0),
                (p + "ffn_gate.weight", "Q4_K", a["ffn"], d, 1.0),
                (p + "ffn_up.weight", "Q4_0" if not odd else "Q5_0", a["ffn"], d, 1.0),
                (p + "ffn_down.weight", "Q6_K" if not odd else "Q4_K", d, a["ffn"], 1.0)]
    out += [("output_norm.weight", "F32", 1, d, 1.0)]
    if not a["tied"]:
        out += [("output.weight", "PERM", n_vocab, d, 4.0)]  # see the docstring
    return out


def tensor_bytes(t, typ, rows, cols, g):
    """The bytes of tensor number t (1-based); PERM: token_embd's (tensor 1,
    type Q6_K) rows permuted."""
    if typ == "PERM":
        src = np.frombuffer(tensor_bytes(1, "Q6_K", rows, cols, g), dtype=np.uint8)
        src = src.reshape(rows, -1)
        out = np.empty_like(src)
        out[(PERM_A * np.arange(rows) + PERM_B) % rows] = src
        return out.tobytes()
    if typ == "F32":
        n = rows * cols
        f = stream(t | 1 << 20, n)
        k = (f & np.uint64(1023)).astype(np.int64) - 512
        return (np.float32(g) + (k.astype(np.float32) / np.float32(4096))).astype(
            np.float32).tobytes()
    bs, tsz = BLOCK[typ]
    nb = rows * cols // bs
    size = nb * tsz
    raw = stream(t, (size + 7) // 8).view(np.uint8)[:size].copy().reshape(nb, tsz)
    fld = stream(t | 1 << 20, nb)
    base = fp16_bits(g / (SCALE_DIV[typ] * np.sqrt(cols)))
    d = (np.uint64(base) + (fld & np.uint64(63))).astype(np.uint16)
    off = {"Q8_0": 0, "Q4_0": 0, "Q5_0": 0, "Q4_K": 0, "Q6_K": 208}[typ]
    raw[:, off:off + 2] = d.view(np.uint8).reshape(nb, 2)
    if typ == "Q4_K":
        base2 = fp16_bits(7.5 * g / (SCALE_DIV[typ] * np.sqrt(cols)))
        dmin = (np.uint64(base2) + ((fld >> np.uint64(8)) & np.uint64(63))).astype(np.uint16)
        raw[:, 2:4] = dmin.view(np.uint8).reshape(nb, 2)
    return raw.tobytes()


def tensor_hash(arch, n_vocab):
    """Digest of every tensor's bytes: the sum mod 2^64 over tensors t and
    their little-endian 64-bit words w_i (the last one zero-padded) of
    sm64(w_i ^ (t << 40 | i))."""
    h = 0
    for t, (name, typ, rows, cols, g) in enumerate(tensors(arch, n_vocab), 1):
        b = tensor_bytes(t, typ, rows, cols, g)
        b += bytes(-len(b) % 8)
        w = np.frombuffer(b, dtype=np.uint64)
        with np.errstate(over="ignore"):
            key = np.uint64(t << 40) | np.arange(len(w), dtype=np.uint64)
            h = (h + int(sm64(w ^ key).sum(dtype=np.uint64))) & M64
    return h


def read_vocab(path):
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields

    def strs(key):
        fl = f[key]
        return [bytes(fl.parts[i]).decode("utf-8") for i in fl.data]

    def ints(key):
        fl = f[key]
        return [int(fl.parts[i][0]) for i in fl.data]

    def u32(key):
        return int(f[key].parts[f[key].data[0]][0]) if key in f else None

    return dict(tokens=strs("tokenizer.ggml.tokens"), types=ints("tokenizer.ggml.token_type"),
                merges=strs("tokenizer.ggml.merges"), bos=u32("tokenizer.ggml.bos_token_id"),
                eos=u32("tokenizer.ggml.eos_token_id"))


def write(arch, vocab, path):
    import gguf
    a = ARCHS[arch]
    n_vocab = len(vocab["tokens"])
    w = gguf.GGUFWriter(path, arch)
    w.add_name("%s-synth (random weights, Trellis tests)" % arch)
    w.add_block_count(a["n_layers"])
    w.add_context_length(a["ctx"])
    w.add_embedding_length(a["dim"])
    w.add_feed_forward_length(a["ffn"])
    w.add_head_count(a["n_heads"])
    w.add_head_count_kv(a["n_kv"])
    w.add_rope_freq_base(a["rope_base"])
    w.add_layer_norm_rms_eps(a["eps"])
    if a["head_dim"] * a["n_heads"] != a["dim"]:
        w.add_key_length(a["head_dim"])
        w.add_value_length(a["head_dim"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(vocab["tokens"])
    w.add_token_types(vocab["types"])
    w.add_token_merges(vocab["merges"])
    if vocab["bos"] is not None:
        w.add_bos_token_id(vocab["bos"])
    if vocab["eos"] is not None:
        w.add_eos_token_id(vocab["eos"])
    w.add_add_bos_token(False)
    for t, (name, typ, rows, cols, g) in enumerate(tensors(arch, n_vocab), 1):
        data = np.frombuffer(tensor_bytes(t, typ, rows, cols, g), dtype=np.uint8)
        if typ == "F32":
            w.add_tensor(name, data.view(np.float32).reshape(rows, cols) if rows > 1
                         else data.view(np.float32))
        else:
            qt = getattr(gguf.GGMLQuantizationType, "Q6_K" if typ == "PERM" else typ)
            w.add_tensor(name, data.reshape(rows, -1), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    import os
    vocab = read_vocab(sys.argv[1])
    os.makedirs(sys.argv[2], exist_ok=True)
    for arch in ARCHS:
        path = os.path.join(sys.argv[2], arch + "-synth.gguf")
        write(arch, vocab, path)
        print(path)


if __name__ == "__main__":
    main()
