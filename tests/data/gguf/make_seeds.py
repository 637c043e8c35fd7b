#!/usr/bin/env python3
"""Writes the GGUF fuzz seed corpus (tests/fuzz/corpus/gguf/): a few tiny
valid and invalid files covering every value type, nested arrays, tensor
infos and padding. Self-contained (struct only). Run from the repo root:
    python3 tests/data/gguf/make_seeds.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "fuzz", "corpus", "gguf")
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
       F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}


def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def val(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(val(et, x) for x in items)
    return struct.pack(FMT[t], v)


def kv(key, t, v):
    return s(key) + struct.pack("<I", t) + val(t, v)


def tensor(name, ne, dtype, off):
    return (s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
            + struct.pack("<IQ", dtype, off))


def gguf(kvs, tensors, data=b"", version=3, align=32):
    b = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    b += b"".join(kvs) + b"".join(tensors)
    b += b"\0" * (-len(b) % align)
    return b + data


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    kvs = [kv("general.architecture", STR, "llama"), kv("a.u8", U8, 7), kv("a.i8", I8, -7),
           kv("a.u16", U16, 700), kv("a.i16", I16, -700), kv("a.u32", U32, 70000),
           kv("a.i32", I32, -70000), kv("a.f32", F32, 0.5), kv("a.bool", BOOL, 1),
           kv("a.u64", U64, 1 << 40), kv("a.i64", I64, -(1 << 40)), kv("a.f64", F64, 2.5),
           kv("tok", ARR, (STR, ["<s>", "a", ""])), kv("ty", ARR, (I32, [1, 2, 3])),
           kv("sc", ARR, (F32, [0.0, -1.0]))]
    ts = [tensor("w", [4, 2], 0, 0), tensor("q", [32], 3, 32)]
    seeds["valid_small.gguf"] = gguf(kvs, ts, bytes(range(52)))
    seeds["valid_v2_empty.gguf"] = gguf([], [], version=2)
    seeds["valid_nested_align64.gguf"] = gguf(
        [kv("general.alignment", U32, 64),
         kv("n", ARR, (ARR, [(U8, [1, 2]), (STR, ["x"]), (ARR, [(BOOL, [0, 1])])]))],
        [tensor("t", [32, 2, 2, 2], 8, 0)], bytes(8 * 34), align=64)
    seeds["bad_v1.gguf"] = b"GGUF" + struct.pack("<III", 1, 0, 0)
    bad = bytearray(seeds["valid_small.gguf"])
    seeds["bad_truncated.gguf"] = bytes(bad[:len(bad) - 5])
    for name, b in seeds.items():
        assert len(b) < 4096
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b)


if __name__ == "__main__":
    main()
