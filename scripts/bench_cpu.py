#!/usr/bin/env python3
"""Side-by-side CPU speed: Trellis vs llama.cpp on the default model (or
another GGUF: --model PATH, or --model gemma3-270m for the cached Gemma 3
270M Q4_K_M of scripts/setup.sh --model gemma3-270m).

    python3 scripts/bench_cpu.py [--rounds 3] [--threads 1,2] [--model M]

Runs build/tests/bench_model (Trellis) and llama.cpp through
llama-cpp-python (venv at ~/.cache/trellis/refvenv, see
scripts/ref/make_model_ref.py) alternately, same GGUF, same threads, the
same synthetic 512-token prompt (id_i = (i*7919) % 49000 + 100) prefilled as
one batch, then 128 greedy decode steps. llama.cpp is timed around each
Llama.eval call only (the argmax between steps is not charged to it; the
binding's per-call overhead, a copy of one logits row, is ~1% of a step). Reports medians over rounds and the ratios Trellis/llama.cpp.
"""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFPY = os.path.expanduser("~/.cache/trellis/refvenv/bin/python")
CACHE = os.path.join(os.environ.get("TRELLIS_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trellis"), "models")
MODEL = os.environ.get("TRELLIS_MODEL", os.path.join(CACHE, "SmolLM2-135M-Instruct.Q4_1.gguf"))
NAMED = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
         "gemma3-270m": "gemma-3-270m-q4_k_m.gguf"}

LLAMA = r'''
import json, sys, time, numpy as np
from llama_cpp import Llama
path, t, n_prompt, n_dec = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = Llama(model_path=path, n_ctx=n_prompt + n_dec + 16, n_batch=n_prompt + n_dec + 16, n_ubatch=n_prompt,
            n_threads=t, n_threads_batch=t, logits_all=False, verbose=False)
ids = [(i * 7919) % 49000 + 100 for i in range(n_prompt)]
res = []
for rep in range(2):           # first repetition warms up
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    t_prefill = time.perf_counter() - t0
    t_dec = 0.0
    for k in range(n_dec):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t0 = time.perf_counter()
        llm.eval([tok])          # only the eval call is timed, not argmax
        t_dec += time.perf_counter() - t0
    res.append((n_prompt / t_prefill, n_dec / t_dec))
print(json.dumps({"engine": "llama.cpp", "threads": t, "prefill_tok_s": res[-1][0],
                  "decode_tok_s": res[-1][1]}))
'''

def run_trellis(t, n_prompt, n_dec):
    exe = os.path.join(HERE, "build", "tests", "bench_model")
    out = subprocess.check_output([exe, "-m", MODEL, "-t", str(t), "-p", str(n_prompt),
                                   "-n", str(n_dec), "-r", "2"], text=True)
    return json.loads(out.strip().splitlines()[-1])

def run_llama(t, n_prompt, n_dec):
    out = subprocess.check_output([REFPY, "-c", LLAMA, MODEL, str(t), str(n_prompt), str(n_dec)],
                                  text=True)
    return json.loads(out.strip().splitlines()[-1])

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--model", default=None,
                    help="GGUF path, or smollm2 / gemma3-270m (from the model cache)")
    a = ap.parse_args()
    global MODEL
    if a.model:
        MODEL = os.path.join(CACHE, NAMED[a.model]) if a.model in NAMED else a.model
    if not os.path.exists(MODEL):
        sys.exit("bench_cpu: model %s missing (scripts/setup.sh [--model gemma3-270m])" % MODEL)
    print("model: %s" % os.path.basename(MODEL), file=sys.stderr)
    rows = []
    for t in [int(x) for x in a.threads.split(",")]:
        tr, ll = {"p": [], "d": []}, {"p": [], "d": []}
        for r in range(a.rounds):          # alternate engines every round
            for name, fn, acc in (("trellis", run_trellis, tr), ("llama.cpp", run_llama, ll)):
                res = fn(t, a.prompt, a.decode)
                acc["p"].append(res["prefill_tok_s"]); acc["d"].append(res["decode_tok_s"])
                print(f"  threads {t} round {r} {name:9s} prefill {res['prefill_tok_s']:8.1f} tok/s"
                      f"  decode {res['decode_tok_s']:7.1f} tok/s", file=sys.stderr)
        for what, key in (("prefill %d" % a.prompt, "p"), ("decode %d" % a.decode, "d")):
            mt, ml = statistics.median(tr[key]), statistics.median(ll[key])
            rows.append((t, what, mt, ml, mt / ml))
    print("| threads | phase | Trellis tok/s | llama.cpp tok/s | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for t, what, mt, ml, ratio in rows:
        print(f"| {t} | {what} | {mt:.1f} | {ml:.1f} | {ratio:.2f}x |")

if __name__ == "__main__":
    main()
