#!/usr/bin/env python3
"""Reference data from llama.cpp for the model families beyond llama:
Gemma 3 on its real weights, qwen2/qwen3 on random-weight files.

Commands that produced the checked-in data (llama-cpp-python 0.3.36 and the
`gguf`/`numpy` packages in the venv of scripts/ref/make_model_ref.py):

    PY=~/.cache/trellis/refvenv/bin/python
    $PY scripts/ref/make_family_ref.py gemma3 \\
        ~/.cache/trellis/models/gemma-3-270m-q4_k_m.gguf tests/data/model
    $PY scripts/ref/make_family_ref.py synth \\
        ~/.cache/trellis/models/SmolLM2-135M-Instruct.Q4_1.gguf tests/data/model

`gemma3 MODEL OUT` writes OUT/gemma3_ref.json; `synth VOCAB OUT` writes the
random-weight qwen2/qwen3 GGUFs (scripts/ref/synth_models.py, VOCAB's
vocabulary) into a temporary folder and OUT/qwen2_synth_ref.json and
OUT/qwen3_synth_ref.json, each with the tensors' digest, which the C test
checks against its own rebuild of the file (tests/unit/synth_gguf.h).

Per case: the prompt ids (tokenized by llama.cpp, special tokens parsed,
BOS as the model asks), llama.cpp's first-step logits, the same logits in
float64 without activation quantization (numpy_forward.py), and 64 greedy
steps with the top-2 logit gap of each (a test may differ from llama.cpp
only where the reference itself was near a tie). Logits are stored for
every `stride`-th token id (a file of n_vocab / stride float32s; 262,144
logits per step would make 1 MB files) plus the top 64 ids with values.
"""
import json
import os
import sys
import tempfile

import numpy as np
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_forward  # noqa: E402
import synth_models  # noqa: E402

N_GEN = 64
TOP = 64

GEMMA_TURN = "<start_of_turn>{}\n{}<end_of_turn>\n"


def long_text():
    """~680 tokens of varied prose (Gemma's tokenizer): longer than Gemma 3's
    512-token window, and with the 64 generated steps within n_ctx."""
    topics = ["rivers", "mountains", "libraries", "bridges", "gardens", "trains",
              "harbours", "forests", "markets", "observatories"]
    verbs = ["shape", "connect", "protect", "feed", "inspire", "surprise"]
    out = []
    for i in range(25):
        t, v = topics[i % len(topics)], verbs[(i * 7) % len(verbs)]
        out.append("Sentence %d: the %s of the old city %s the people who live near them, "
                   "and every season brings a new story." % (i + 1, t, v))
    return " ".join(out) + " In summary, the city"


GEMMA_PROMPTS = [
    "The capital of France is",
    GEMMA_TURN.format("user", "What is the capital of France?") + "<start_of_turn>model\n",
    GEMMA_TURN.format("user", "Write a haiku about the sea.") + "<start_of_turn>model\n",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the mountains, there lived",
    "1, 2, 3, 4, 5, 6, 7, 8,",
    "Le chat est assis sur le tapis. Il fait beau aujourd'hui, et",
    long_text(),
]

SYNTH_PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 4, 5, 6, 7, 8,",
]


def run(model_path, prompts, out_dir, name, stride, add_bos, extra):
    cache = {}
    cases = []
    for i, text in enumerate(prompts):
        # a fresh context per case (reset() leaves the sliding-window
        # layers' cache cells taken: a 600-token prompt after others found
        # no slot); swa_full: that cache holds the whole context, so a
        # prompt longer than the window fits one batch (the window is
        # still applied by the attention mask)
        llm = Llama(model_path=model_path, n_ctx=1024, n_batch=1024, n_ubatch=1024,
                    n_threads=2, logits_all=True, swa_full=True, verbose=False)
        ids = llm.tokenize(text.encode(), add_bos=add_bos, special=True)
        assert len(ids) + N_GEN <= 1024, len(ids)
        llm.eval(ids)
        first = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        exact = numpy_forward.forward(model_path, ids, cache).astype(np.float32)
        lf, ef = "%s_logits_%d.f32" % (name, i), "%s_exact_%d.f32" % (name, i)
        first[::stride].tofile(os.path.join(out_dir, lf))
        exact[::stride].tofile(os.path.join(out_dir, ef))
        top = [[int(t), float(first[t])] for t in np.argsort(first)[::-1][:TOP]]
        gen, gaps = [], []
        logits = first
        for _ in range(N_GEN):
            top2 = np.argsort(logits)[-2:]
            tok = int(np.argmax(logits))
            gaps.append(float(logits[top2[1]] - logits[top2[0]]))
            gen.append(tok)
            llm.eval([tok])
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        cases.append({"prompt": text, "prompt_ids": ids, "generated": gen, "top2_gap": gaps,
                      "logits_file": lf, "exact_file": ef, "top": top})
        print(name, i, len(ids), repr(llm.detokenize(gen).decode(errors="replace"))[:70],
              flush=True)
        del llm
    ref = {"model": os.path.basename(model_path), "llama_cpp_python": "0.3.36",
           "n_gen": N_GEN, "n_vocab": int(len(first)), "logits_stride": stride,
           "cases": cases}
    ref.update(extra)
    with open(os.path.join(out_dir, name + "_ref.json"), "w") as f:
        json.dump(ref, f, indent=1)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("gemma3", "synth"):
        print(__doc__)
        sys.exit(2)
    what, src, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    if what == "gemma3":
        run(src, GEMMA_PROMPTS, out, "gemma3", 8, True, {})
        return
    vocab = synth_models.read_vocab(src)
    with tempfile.TemporaryDirectory() as tmp:
        for arch in synth_models.ARCHS:
            path = os.path.join(tmp, arch + "-synth.gguf")
            synth_models.write(arch, vocab, path)
            digest = synth_models.tensor_hash(arch, len(vocab["tokens"]))
            run(path, SYNTH_PROMPTS, out, arch + "_synth", 4, False,
                {"digest": "%016x" % digest, "arch": arch})


if __name__ == "__main__":
    main()
