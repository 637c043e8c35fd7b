#!/usr/bin/env python3
"""Reference greedy generations and first-step logits from llama.cpp.

Produces tests/data/model/smollm2_ref.json (+ one .f32 file of first-step
logits per prompt) for tests/unit/test_model.c. Command that produced the
checked-in data (llama-cpp-python 0.3.36, built on this machine):

    python3 -m venv ~/.cache/trellis/refvenv
    ~/.cache/trellis/refvenv/bin/pip install llama-cpp-python==0.3.36 numpy
    ~/.cache/trellis/refvenv/bin/python scripts/ref/make_model_ref.py \
        ~/.cache/trellis/models/SmolLM2-135M-Instruct.Q4_1.gguf tests/data/model

Prompts are tokenized by llama.cpp (special tokens parsed) and the ids are
stored, so the model test does not depend on Trellis's tokenizer. For each
generated step the top-2 logit gap is stored too: a divergence from
llama.cpp is only acceptable where the reference itself was near a tie.
"""
import json, os, sys
import numpy as np
from llama_cpp import Llama

CHAT = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
PROMPTS = [
    CHAT.format("What is the capital of France?"),
    CHAT.format("Write a haiku about the sea."),
    CHAT.format("Explain what a radix tree is in two sentences."),
    CHAT.format("List three prime numbers greater than 100."),
    CHAT.format("Translate 'good morning' into Spanish, French and German."),
    CHAT.format("Write a Python function that reverses a string."),
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the mountains, there lived",
    "1, 2, 3, 4, 5, 6, 7, 8,",
    CHAT.format("Give me a JSON object describing a cat with name and age."),
    "Le chat est assis sur le tapis. Il fait beau aujourd'hui, et",
]
N_GEN = 64

def main():
    model_path, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    llm = Llama(model_path=model_path, n_ctx=512, n_batch=512, n_threads=2,
                logits_all=True, verbose=False)
    cases = []
    for i, text in enumerate(PROMPTS):
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        first = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        first.tofile(os.path.join(out_dir, f"logits_{i}.f32"))
        gen, gaps = [], []
        logits = first
        for _ in range(N_GEN):
            top2 = np.argsort(logits)[-2:]
            tok = int(np.argmax(logits))
            gaps.append(float(logits[top2[1]] - logits[top2[0]]))
            gen.append(tok)
            llm.eval([tok])
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        cases.append({"prompt": text, "prompt_ids": ids, "generated": gen,
                      "top2_gap": gaps, "logits_file": f"logits_{i}.f32"})
        print(i, repr(llm.detokenize(gen).decode(errors="replace"))[:80])
    with open(os.path.join(out_dir, "smollm2_ref.json"), "w") as f:
        json.dump({"model": os.path.basename(model_path),
                   "llama_cpp_python": "0.3.36", "n_gen": N_GEN,
                   "cases": cases}, f, indent=1)

if __name__ == "__main__":
    main()
