#!/usr/bin/env python3
"""LLGuidance's compile time (TTFM) over a MaskBench file, beside Trellis's.

  llg_ttfm.py DATA.jsonl.gz [--model MODEL.gguf] [--out TSV] [--trellis-csv CSV]

Compiles every schema the way MaskBench and the peers' runner time LLGuidance's TTFM
(LLMatcher.grammar_from_json_schema with flexible whitespace, then LLMatcher) and prints
p50 / p90 / p99 / p99.9 in microseconds of wall time over the schemas it compiles. No
test instances are run, so no instance tokenizer is needed: the vocabulary's token bytes
come from the GGUF (tokenizer.ggml.tokens, GPT-2 byte-level or SentencePiece pieces) and
the tokenizer handed to LLGuidance splits text into single-byte tokens. --trellis-csv
(a `trellis bench maskbench --csv` file of the same data) adds Trellis's percentiles over
all its compiles and over the schemas both compile.

Needs the PyPI packages llguidance and gguf (in a venv outside the repository).
Defaults: MODEL = the cached SmolLM2 ($TRELLIS_MODEL overrides it). Run on a quiet machine, alternating with Trellis.
"""

import argparse
import gzip
import json
import sys
import time

from maskbench_compare import default_model  # the cached SmolLM2, or $TRELLIS_MODEL


def byte_level_decoder():
    """GPT-2's byte-level alphabet backwards: printable Latin-1 bytes stand for
    themselves, the other 68 bytes (in order) for U+0100, U+0101, ..."""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(0x100 + extra)] = b
            extra += 1
    return table


def gguf_tokens(path):
    """(token byte strings, eos id): special tokens get LLGuidance's 0xFF marker."""
    from gguf import GGUFReader
    fields = GGUFReader(path, "r").fields

    def one(key):
        f = fields[key]
        return f.parts[f.data[0]]

    model = one("tokenizer.ggml.model").tobytes().decode()
    f = fields["tokenizer.ggml.tokens"]
    texts = [f.parts[i].tobytes() for i in f.data]
    ft = fields.get("tokenizer.ggml.token_type")
    types = [int(ft.parts[i][0]) for i in ft.data] if ft else [1] * len(texts)
    eos = int(one("tokenizer.ggml.eos_token_id")[0])
    dec = byte_level_decoder()
    out = []
    for i, (raw, kind) in enumerate(zip(texts, types)):
        text = raw.decode("utf-8", errors="surrogateescape")
        # llama.cpp's token types: 1 normal, 4 user-defined (its text as is), 6 byte
        # (<0xNN>); the others (undefined, unknown, control, unused) are special
        if kind == 6 and text.startswith("<0x") and len(text) == 6:
            out.append(bytes([int(text[3:5], 16)]))
        elif kind == 4 and i != eos:
            out.append(raw)
        elif kind != 1 or i == eos:
            out.append(b"\xff" + raw)
        elif model == "gpt2" and all(ch in dec for ch in text):
            out.append(bytes(dec[ch] for ch in text))
        elif model == "gpt2":
            out.append(b"\xff" + raw)  # outside the byte alphabet: never in a mask
        else:
            out.append(text.replace("\u2581", " ").encode("utf-8", errors="surrogateescape"))
    return out, eos


def pct(vals, p):
    s = sorted(vals)
    return s[min(len(s) - 1, int(len(s) * p))] if s else float("nan")


def row(name, vals):
    return "| %s | %d | %s |" % (name, len(vals), " | ".join(
        "{:,.0f}".format(pct(vals, p)) for p in (0.5, 0.9, 0.99, 0.999)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("data")
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--out", help="one line per schema: id, ok|error, microseconds")
    ap.add_argument("--trellis-csv")
    a = ap.parse_args()
    import llguidance as llg
    from llguidance._tokenizer import TokenizerWrapper
    tokens, eos = gguf_tokens(a.model)
    single = {}
    for i, t in enumerate(tokens):
        if len(t) == 1:
            single.setdefault(t[0], i)

    class Bytes:  # the instance tokenizer: one token per byte (only compiles run here)
        eos_token_id, bos_token_id, special_token_ids = eos, None, []

        def __init__(self):
            self.tokens = tokens

        def __call__(self, s):
            s = s.encode() if isinstance(s, str) else s
            return [single[b] for b in s if b in single]

    tok = llg.LLTokenizer(TokenizerWrapper(Bytes()))
    flexible = {"whitespace_flexible": True}
    times, lines = {}, []
    with gzip.open(a.data, "rt") as f:
        for line in f:
            item = json.loads(line)
            schema, text = item["schema"], json.dumps(item["schema"])
            t0 = time.perf_counter()
            try:
                if isinstance(schema, dict):
                    g = llg.LLMatcher.grammar_from_json_schema(text, overrides=flexible)
                else:  # a boolean schema takes no options
                    g = llg.LLMatcher.grammar_from_json_schema(text)
                ok = not llg.LLMatcher(tok, g).is_error()
            except Exception:  # LLGuidance refuses by raising, too
                ok = False
            us = (time.perf_counter() - t0) * 1e6
            lines.append("%s\t%s\t%.1f\n" % (item["id"], "ok" if ok else "error", us))
            if ok:
                times[item["id"]] = us
    if a.out:
        with open(a.out, "w") as f:
            f.writelines(lines)
    print("| TTFM (µs, wall) | compiled | p50 | p90 | p99 | p99.9 |")
    print("| --- | --: | --: | --: | --: | --: |")
    print(row("LLGuidance %s" % getattr(llg, "__version__", ""), list(times.values())))
    if a.trellis_csv:
        import csv
        with open(a.trellis_csv) as f:
            tr = {r["id"]: float(r["ttfm_us"]) for r in csv.DictReader(f) if r["ttfm_us"]}
        both = [i for i in times if i in tr]
        print(row("Trellis", list(tr.values())))
        print(row("both compile: LLGuidance", [times[i] for i in both]))
        print(row("both compile: Trellis", [tr[i] for i in both]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
