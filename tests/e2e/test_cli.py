#!/usr/bin/env python3
"""End-to-end tests of the `trellis` CLI on the default model.

    python3 tests/e2e/test_cli.py BUILD_DIR

Every bad input must give a clear message on stderr and a non-zero exit,
never a crash (a signal) or a hang (each run has a timeout). Corrupt model
files are made here from the real one (truncated, non-GGUF, architecture
renamed, a tensor type changed). Prints 'N passed, N failed'.
"""
import json, os, subprocess, sys, tempfile

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
TRELLIS = os.path.join(BUILD, "trellis")
MODEL = os.environ.get("TRELLIS_MODEL") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
    "trellis", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TMP = tempfile.mkdtemp(prefix="trellis-e2e-")
results = []

def run(*args, stdin=None, timeout=300):
    p = subprocess.run([TRELLIS, *args], input=stdin, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

def case(fn):
    try:
        fn()
        results.append((fn.__name__, None))
        print(f"PASS {fn.__name__}")
    except Exception as e:  # noqa: BLE001 - report every failure
        results.append((fn.__name__, e))
        print(f"FAIL {fn.__name__}: {e!r}")
    return fn

def expect_error(rc, err, *needles):
    assert rc not in (0,) and rc > 0, f"expected a clean non-zero exit, got {rc}; stderr={err!r}"
    for n in needles:
        assert n in err, f"expected {n!r} in stderr: {err!r}"

def patched_model(name, edits):
    data = bytearray(open(MODEL, "rb").read(8 << 20))  # header lives in the first MiBs
    for find, repl in edits:
        i = data.find(find)
        assert i >= 0, f"{find!r} not in the model header"
        data[i:i + len(repl)] = repl
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(data)
        with open(MODEL, "rb") as src:
            src.seek(len(data))
            f.write(src.read())
    return path

@case
def greedy_generation_json():
    rc, out, err = run("generate", "-p", "The capital of France is", "-n", "8", "--json", "-t", "2")
    assert rc == 0, err
    o = json.loads(out)
    assert o["completion_tokens"] == 8 and len(o["tokens"]) == 8
    assert o["finish_reason"] == "length"
    assert o["prompt_tokens"] == 5, o["prompt_tokens"]
    assert o["timings"]["decode_tok_per_s"] > 0 and o["timings"]["prefill_tok_per_s"] > 0
    assert "Paris" in o["text"], o["text"]

@case
def chat_stops_at_end_of_turn():
    rc, out, err = run("generate", "--chat", "-p", "Say hello.", "-n", "200", "--json")
    assert rc == 0, err
    o = json.loads(out)
    assert o["finish_reason"] == "stop", o
    assert 0 < o["completion_tokens"] < 200

@case
def streaming_prints_text():
    rc, out, err = run("generate", "-p", "1, 2, 3, 4,", "-n", "6")
    assert rc == 0, err
    assert out.strip().startswith("5"), out

@case
def seeded_sampling_is_reproducible():
    a = run("generate", "-p", "Once upon a time", "-n", "16", "--temp", "1.0", "--top-p", "0.9", "--seed", "7", "--json")
    b = run("generate", "-p", "Once upon a time", "-n", "16", "--temp", "1.0", "--top-p", "0.9", "--seed", "7", "--json")
    c = run("generate", "-p", "Once upon a time", "-n", "16", "--temp", "1.0", "--top-p", "0.9", "--seed", "8", "--json")
    assert a[0] == b[0] == c[0] == 0
    ta, tb, tc = (json.loads(x[1])["tokens"] for x in (a, b, c))
    assert ta == tb and ta != tc

@case
def ignore_eos_runs_to_length():
    rc, out, err = run("generate", "--chat", "-p", "Say hi.", "-n", "40", "--ignore-eos", "--json")
    assert rc == 0, err
    assert json.loads(out)["completion_tokens"] == 40

@case
def info_describes_model():
    rc, out, err = run("info")
    assert rc == 0, err
    for n in ("llama", "layers:         30", "49152", "Q4_1", "Q8_0", "<|im_end|>", "runnable:       yes"):
        assert n in out, (n, out[:2000])

@case
def tokenize_json():
    rc, out, err = run("tokenize", "-p", "Hello world", "--json")
    assert rc == 0, err
    assert json.loads(out)["ids"] == [19556, 905], out

@case
def missing_model_file():
    rc, out, err = run("generate", "-m", "/nonexistent/model.gguf", "-p", "x")
    expect_error(rc, err, "/nonexistent/model.gguf")

@case
def non_gguf_file():
    p = os.path.join(TMP, "not.gguf")
    open(p, "wb").write(b"this is not a gguf file at all" * 10)
    rc, out, err = run("generate", "-m", p, "-p", "x")
    expect_error(rc, err, "magic")

@case
def truncated_model():
    p = os.path.join(TMP, "trunc.gguf")
    open(p, "wb").write(open(MODEL, "rb").read(1 << 20))
    rc, out, err = run("generate", "-m", p, "-p", "x")
    expect_error(rc, err, "at byte")

@case
def unsupported_architecture():
    p = patched_model("arch.gguf", [(b"\x05\x00\x00\x00\x00\x00\x00\x00llama", b"\x05\x00\x00\x00\x00\x00\x00\x00lamma")])
    rc, out, err = run("generate", "-m", p, "-p", "x")
    expect_error(rc, err, "unsupported architecture 'lamma'")

@case
def unsupported_tensor_type():
    # blk.0.attn_norm.weight: F32 (type 0) -> I32 (type 26), same size
    name = b"blk.0.attn_norm.weight"
    data = open(MODEL, "rb").read(8 << 20)
    i = data.find(name) + len(name)
    n_dims = int.from_bytes(data[i:i + 4], "little")
    t = i + 4 + 8 * n_dims
    assert data[t:t + 4] == b"\x00\x00\x00\x00"
    p = patched_model("type.gguf", [(data[i - 8 - len(name):t + 4], data[i - 8 - len(name):t] + b"\x1a\x00\x00\x00")])
    rc, out, err = run("generate", "-m", p, "-p", "x")
    expect_error(rc, err, "blk.0.attn_norm.weight", "I32")

@case
def prompt_longer_than_context():
    rc, out, err = run("generate", "-p", "word " * 300, "--ctx", "64")
    expect_error(rc, err, "longer than the context")

@case
def n_zero_rejected():
    rc, out, err = run("generate", "-p", "x", "-n", "0")
    expect_error(rc, err, "-n", "between")

@case
def unknown_flag():
    rc, out, err = run("generate", "-p", "x", "--bogus")
    expect_error(rc, err, "unknown option '--bogus'")

@case
def malformed_number():
    rc, out, err = run("generate", "-p", "x", "--temp", "hot")
    expect_error(rc, err, "--temp", "number")

@case
def missing_value():
    rc, out, err = run("generate", "-p")
    expect_error(rc, err, "needs a value")

@case
def invalid_utf8_prompt():
    p = os.path.join(TMP, "bad.txt")
    open(p, "wb").write(b"hello \xff\xfe world")
    rc, out, err = run("generate", "-f", p, "-n", "2")
    expect_error(rc, err, "not valid UTF-8", "byte 6")

@case
def empty_prompt():
    rc, out, err = run("generate", "-p", "", "-n", "2")
    expect_error(rc, err, "empty")

REGEXES = [
    r"2024-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    r"\(?[0-9]{3}\)? ?[0-9]{3}-[0-9]{4}",
    r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])",
    r"[a-z_][a-z0-9_]{2,15}",
    r'\{"name": "[A-Z][a-z]+", "age": [1-9][0-9]?\}',
    r"(red|green|blue|yellow)",
    r"[A-Z][a-z]+ [A-Z][a-z]+",
    r"-?[0-9]+\.[0-9]{2}",
]

@case
def regex_constrained_outputs_match():
    import re
    for rx in REGEXES:
        for extra in ([], ["--temp", "1.0", "--seed", "3"], ["--temp", "1.0", "--seed", "11"]):
            rc, out, err = run("generate", "--chat", "-p", "Answer with one value.", "--regex", rx,
                               "-n", "48", "--json", *extra)
            assert rc == 0, (rx, err)
            o = json.loads(out)
            c = o["constraint"]
            if o["finish_reason"] == "stop":
                assert c["accepted"] and re.fullmatch(rx, o["text"]), (rx, o["text"])
            else:  # cut by max tokens: the text must still be a live prefix
                assert o["finish_reason"] == "length", o

@case
def choice_picks_one_alternative():
    rc, out, err = run("generate", "--chat", "-p", "Is fire hot?", "--choice", "yes",
                       "--choice", "no", "--choice", "maybe (a+b)", "--json", "-n", "8")
    assert rc == 0, err
    o = json.loads(out)
    assert o["text"] in ("yes", "no", "maybe (a+b)") and o["finish_reason"] == "stop", o

@case
def jump_forward_saves_forward_passes():
    rc, out, err = run("generate", "--chat", "-p", "A person as JSON.", "--regex",
                       r'\{"name": "[A-Z][a-z]+", "age": [1-9][0-9]?\}', "--json", "-n", "40")
    assert rc == 0, err
    c = json.loads(out)["constraint"]
    assert c["forced_tokens"] >= 5 and c["forward_passes"] < json.loads(out)["completion_tokens"], c

@case
def bad_regex_is_a_clear_error():
    rc, out, err = run("generate", "-p", "x", "--regex", "a(?=b)")
    expect_error(rc, err, "lookahead", "byte 1")
    rc, out, err = run("generate", "-p", "x", "--regex", "(a")
    expect_error(rc, err, "bad --regex")
    rc, out, err = run("generate", "-p", "x", "--regex", "a", "--choice", "b")
    expect_error(rc, err, "not both")

@case
def load_modes_give_the_same_tokens():
    outs = []
    for mode in ("mmap", "read", "auto"):
        rc, out, err = run("generate", "-p", "The capital of France is", "-n", "8", "--json",
                           "-t", "2", "--load", mode)
        assert rc == 0, err
        o = json.loads(out)
        assert o["model_load"] in ("mmap", "read") and (mode == "auto" or o["model_load"] == mode), o
        outs.append(o["tokens"])
    assert outs[0] == outs[1] == outs[2], outs
    rc, out, err = run("generate", "-p", "x", "--load", "fast")
    expect_error(rc, err, "--load", "'fast'", "auto, mmap or read")

@case
def samples_run():
    for name, needles in (("sample_embed", ["sample 2:", "engine:"]),
                          ("sample_embed_uv", ["[cancelled;", "wake-ups from the engine"])):
        p = subprocess.run([os.path.join(BUILD, name)], capture_output=True, timeout=300)
        out = p.stdout.decode("utf-8", "replace")
        assert p.returncode == 0, (name, p.returncode, p.stderr.decode("utf-8", "replace"))
        for n in needles:
            assert n in out, (name, n, out)

@case
def unknown_command():
    rc, out, err = run("frobnicate")
    expect_error(rc, err, "unknown command")

passed = sum(1 for _, e in results if e is None)
failed = len(results) - passed
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
