#!/usr/bin/env python3
"""End-to-end tests of the `trellis` CLI on the default model.

    python3 tests/e2e/test_cli.py BUILD_DIR
    E2E_ONLY=REGEX python3 tests/e2e/test_cli.py BUILD_DIR   # only the matching cases

Every bad input must give a clear message on stderr and a non-zero exit,
never a crash (a signal) or a hang (each run has a timeout). Corrupt model
files are made here from the real one (truncated, non-GGUF, architecture
renamed, a tensor type changed). Prints 'N passed, N failed'.
"""
import json, os, re, subprocess, sys, tempfile

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
TRELLIS = os.path.join(BUILD, "trellis")
# found as the binary finds it (base/paths.h): TRELLIS_MODEL, else
# TRELLIS_CACHE/models, else $XDG_CACHE_HOME or ~/.cache under trellis/models
MODEL = os.environ.get("TRELLIS_MODEL") or os.path.join(
    os.environ.get("TRELLIS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trellis"),
    "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TMP = tempfile.mkdtemp(prefix="trellis-e2e-")
results = []

def run(*args, stdin=None, timeout=300):
    p = subprocess.run([TRELLIS, *args], input=stdin, capture_output=True, timeout=timeout)
    err = p.stderr.decode("utf-8", "replace")
    # in a sanitizer build, a report (a leak on an error path too) fails the case
    assert "Sanitizer" not in err, err
    return p.returncode, p.stdout.decode("utf-8", "replace"), err

def case(fn):
    if os.environ.get("E2E_ONLY") and not re.search(os.environ["E2E_ONLY"], fn.__name__):
        return fn
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
    for n in ("llama", "layers:         30", "49152", "Q4_1", "Q8_0", "<|im_end|>", "runnable:       yes",
              "attention:      global in every layer: " + "G" * 30 + "\n"):
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
def generation_stops_at_the_end_of_the_context():
    # -n asks for more than fits: the completion fills the context, finish length
    rc, out, err = run("generate", "-p", "one two three four five six seven eight nine ten", "--ctx", "16",
                       "-n", "100", "--json")
    assert rc == 0, err
    o = json.loads(out)
    assert o["prompt_tokens"] == 10 and o["completion_tokens"] == 6 and o["finish_reason"] == "length", o

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
    expect_error(rc, err, "--regex: bad regex: missing ) for group at byte 0")
    assert err.count("at byte") == 1, err  # the position, said once
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
    rc, out, err = run("generate", "-p", "The capital of France is", "-n", "8", "--json", "-t", "2",
                       "--no-overlap")
    assert rc == 0 and json.loads(out)["tokens"] == outs[0], (out, err)
    rc, out, err = run("generate", "-p", "x", "--load", "fast")
    expect_error(rc, err, "--load", "'fast'", "auto, mmap or read")

@case
def kv_types_generate():
    """Every KV type generates; q8 starts as f16 does on a prompt whose
    first steps are far from ties; the engine reports the types in force
    (a later --kv-type-v overrides --kv-type's V)."""
    outs = {}
    for args in (["--kv-type", "f16"], ["--kv-type", "q8"], ["--kv-type", "q4"],
                 ["--kv-type", "q8", "--kv-type-v", "q4"]):
        rc, out, err = run("generate", "-p", "The capital of France is", "-n", "4", "--json",
                           "-t", "2", *args)
        assert rc == 0, (args, err)
        o = json.loads(out)
        assert o["kv_type_k"] == args[1] and o["kv_type_v"] == args[-1], (args, o)
        assert len(o["tokens"]) >= 1, o
        outs[" ".join(args)] = o["tokens"]
    assert outs["--kv-type q8"][:2] == outs["--kv-type f16"][:2], outs

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


# ---- output of any text: every JSON the CLI writes is valid (issue #13) ----

# Text whose tokens are not valid UTF-8 on their own (a byte-level BPE
# token may hold part of a character): `tokenize --json` died with SIGSEGV.
WORLD = ["ไทย", "日本語のテキスト", "中文文本", "한국어 텍스트", "हिन्दी पाठ", "עברית",
         "Ελληνικά", "Кириллица", "emoji 😀🎉👍🏽", "no-break\u00a0space", "mixed: a\u00e9\u4e2d\U0001F600z"]

def piece_bytes(p):
    return p.encode("utf-8") if isinstance(p, str) else bytes(p)

@case
def tokenize_json_any_text():
    for text in WORLD:
        rc, out, err = run("tokenize", "-p", text, "--json")
        assert rc == 0, (text, rc, err)
        o = json.loads(out)
        assert o["count"] == len(o["ids"]) == len(o["pieces"]) > 0, o
        # the pieces are the text's bytes, exactly: strings when valid
        # UTF-8, arrays of byte values otherwise
        assert b"".join(piece_bytes(p) for p in o["pieces"]) == text.encode(), (text, o)
        rc2, plain, err2 = run("tokenize", "-p", text)
        ids = [int(l.split()[0]) for l in plain.splitlines()[:-1]]
        assert rc2 == 0 and ids == o["ids"], (text, ids, o["ids"])
    # the Thai example of the issue: 6 tokens, every one a partial character
    o = json.loads(run("tokenize", "-p", "ไทย", "--json")[1])
    assert o["ids"] == [31933, 222, 10283, 241, 10283, 112], o
    assert all(isinstance(p, list) for p in o["pieces"]), o

@case
def tokenize_plain_output_is_utf8():
    p = subprocess.run([TRELLIS, "tokenize", "-p", "ไทย 😀 \t\\ '"], capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    text = p.stdout.decode("utf-8")  # strict: partial characters are escaped
    assert "'\\xe0\\xb9'" in text and "\\t" in text, text

@case
def generate_json_any_text():
    for text in WORLD[:4] + WORLD[8:9]:
        rc, out, err = run("generate", "-p", text, "-n", "6", "--json", "--logprobs", "2", "-t", "2")
        assert rc == 0, (text, err)
        o = json.loads(out)
        lp = o["logprobs"]
        assert [e["id"] for e in lp] == o["tokens"], o
        # the tokens' bytes are the text (no stop string cut it; a last
        # token that ends inside a character leaves a U+FFFD)
        joined = b"".join(piece_bytes(e["text"]) for e in lp)
        assert joined.decode("utf-8", "replace") == o["text"], (joined, o)
        for e in lp:
            assert len(e["top"]) == 2 and all(isinstance(t["text"], (str, list)) for t in e["top"]), e

# ---- flags: bad values name the flag, before the model loads (issue #13) ----

@case
def bad_flag_values_name_the_flag():
    # -m names a file that does not exist: an option error must come first
    bad = [(["--threads", "1000"], "--threads: must be between 0 and 512"),
           (["-t", "-1"], "-t: must be between"), (["-n", "0"], "-n: must be between"),
           (["-N", "0"], "-N: must be between"), (["--n-samples", "65"], "--n-samples: must be"),
           (["--temp", "-1"], "--temp: must be"), (["--temp", "nan"], "--temp: expects a finite number"),
           (["--top-k", "-1"], "--top-k: must be"), (["--top-p", "0"], "--top-p: must be in (0, 1]"),
           (["--top-p", "1.5"], "--top-p: must be"), (["--min-p", "2"], "--min-p: must be"),
           (["--repeat-penalty", "0"], "--repeat-penalty: must be"),
           (["--repeat-last-n", "-2"], "--repeat-last-n: must be"),
           (["--presence-penalty", "3"], "--presence-penalty: must be"),
           (["--frequency-penalty", "-3"], "--frequency-penalty: must be"),
           (["--seed", "-1"], "--seed: must be"), (["--seed", "1e3"], "--seed: expects an integer"),
           (["--ctx", "-1"], "--ctx: must be"), (["--batch", "0"], "--batch: must be"),
           (["-b", "65537"], "-b: must be"),
           (["-b", "64", "--chunk-size", "64"], "--batch: sets --max-batch-tokens and --chunk-size"), (["--logprobs", "21"], "--logprobs: must be"),
           (["--logprobs", "2"], "--logprobs: needs --json"),
           (["--load", "fast"], "--load: unknown value 'fast' (auto, mmap or read)"),
           (["--kv-type", "q9"], "--kv-type: unknown value 'q9' (f16, q8 or q4)"),
           (["--kv-type-v", "int8"], "--kv-type-v: unknown value 'int8' (f16, q8 or q4)"),
           (["--schema-mode", "loose"], "--schema-mode: unknown value"),
           (["--whitespace", "tabs"], "--whitespace: unknown value"),
           (["--whitespace", "compact"], "--whitespace: needs --json-schema or --json-object"),
           (["--json-numbers", "exact"], "--json-numbers: unknown value 'exact' (canonical or full)"),
           (["--json-numbers", "full"], "--json-numbers: needs --json-schema or --json-object"),
           (["--schema-mode", "lenient"], "--schema-mode: needs --json-schema"),
           (["--stop", ""], "--stop number 1: must be 1 to 256 bytes"),
           (["--stop", "x" * 257], "--stop number 1: must be 1 to 256 bytes"),
           (sum((["--stop", str(i)] for i in range(17)), []), "--stop: at most 16"),
           (["--choice", ""], "--choice number 1: is empty"),
           (["--regex", ""], "--regex: is empty"),
           (["--regex", "a", "--choice", "b"], "not both --regex and --choice"),
           (["--json-object", "--grammar", "g.gbnf"], "not both --json-object and --grammar"),
           (["--system", "s"], "--system: needs --chat"),
           (["--json=yes"], "--json: takes no value")]
    for args, needle in bad:
        rc, out, err = run("generate", "-m", "/nonexistent/model.gguf", "-p", "x", *args)
        assert rc == 2, (args, rc, err)
        assert err.startswith("trellis generate: ") and needle in err, (args, err)
        assert "model" not in err, (args, err)
    # the bound that depends on the model comes from its header, still
    # before the weights load
    rc, out, err = run("generate", "-p", "x", "--ctx", "100000")
    expect_error(rc, err, "--ctx: the model's context is 8192 tokens, got 100000")
    # the backends are the engine's to know (before the weights bind)
    rc, out, err = run("generate", "-p", "x", "--device", "gpu")
    expect_error(rc, err, "trellis generate: --device: unknown backend 'gpu' (built in: cpu")
    # --device cuda: unknown in a build without it; in a build with it on
    # a machine without a usable GPU, an error naming the reason
    # (kernels/cuda/cuda.h); on a GPU it runs
    rc, out, err = run("generate", "-p", "x", "-n", "1", "--device", "cuda")
    if rc != 0:
        reasons = ("no CUDA driver found", "older than the runtime", "no CUDA device found",
                   "CUDA runtime cannot start")
        assert rc == 2, (rc, err)
        assert ("--device: unknown backend 'cuda' (built in: cpu)" in err or
                ("--device: backend 'cuda' is not available: " in err and
                 any(r in err for r in reasons))), err

@case
def bad_bench_and_tokenize_flags():
    for args, needle in ((["bench", "serve", "--concurrency", "0"], "--concurrency"),
                         (["bench", "serve", "--workload", "chat"], "--workload"),
                         (["bench", "serve", "--radix", "maybe"], "--radix"),
                         (["bench", "serve", "-t", "1000"], "-t: must be between 0 and 512"),
                         (["bench", "serve", "--png", "x.png"], "--png: needs --csv"),
                         (["bench", "serve", "--prompt-min", "9", "--prompt-max", "8"], "--prompt-min"),
                         (["bench", "grammar", "--part", "nano"], "--part: unknown part 'nano'"),
                         (["bench", "grammar", "--requests", "0"], "--requests: must be"),
                         (["bench", "stream"], "--url: required"),
                         (["bench", "stream", "--url", "ftp://h"], "--url: ftp://h: expected a URL"),
                         (["bench", "stream", "--url", "http://h", "--rounds", "0"], "--rounds: must be"),
                         (["bench", "ppl"], "--text: required"),
                         (["bench", "ppl", "--text", "x", "--ctx", "4"], "--ctx: must be between 8"),
                         (["bench", "ppl", "--text", "/nonexistent.txt"], "--text: cannot read"),
                         (["bench", "frobnicate"], "unknown benchmark 'frobnicate'"),
                         (["tokenize", "-p", "x", "--bogus"], "unknown option '--bogus'"),
                         (["info", "--kv=1"], "--kv: takes no value")):
        rc, out, err = run(*args)
        expect_error(rc, err, needle)

@case
def prompt_with_nul_byte():
    p = os.path.join(TMP, "nul.txt")
    open(p, "wb").write(b"hello\x00world")
    rc, out, err = run("generate", "-f", p, "-n", "2")
    expect_error(rc, err, "-f: contains a NUL byte (at byte 5)")

def help_entries(text):
    """The flags a --help text lists, each with its wrapped lines joined:
    the command's own (under "options:" and its sections) and the
    engine's."""
    opts = []
    for l in text.split("\n\n", 1)[-1].splitlines():
        if l.startswith("  -"):
            opts.append(l)
        elif opts and l.startswith(" " * 31):
            opts[-1] += " " + l.strip()
        elif not l.startswith(" "):
            opts.append(None)  # a heading or a paragraph ends the entry
    return [o for o in opts if o]

@case
def help_lists_defaults():
    import re
    for cmd in (["generate"], ["info"], ["tokenize"], ["serve"], ["run"], ["bench", "serve"],
                ["bench", "grammar"], ["bench", "maskbench"]):
        rc, out, err = run(*cmd, "--help")
        assert rc == 0 and out.startswith("usage: trellis " + " ".join(cmd)), (cmd, rc, out, err)
        opts = help_entries(out)
        assert len(opts) >= 3, out
        for l in opts:
            # every flag that takes a number or one of several values, and
            # every on/off flag, says its default
            if re.search(r"--[a-z-]+ (N|X|[a-z]+\|[a-z|]+) ", l) or not re.search(r"--[a-z-]+ [A-Z]", l):
                assert "(default" in l or "--help" in l, (cmd, l)
    rc, out, err = run("bench", "--help")
    assert rc == 0 and "serve" in out and "grammar" in out, out
    rc, out, err = run("--help")
    assert rc == 0 and all(c in out for c in ("generate", "info", "tokenize", "bench")), out
    assert "--version" in out, out

@case
def version():
    """trellis --version: the version of CMakeLists.txt's project()."""
    cml = open(os.path.join(os.path.dirname(__file__), "..", "..", "CMakeLists.txt")).read()
    want = re.search(r"project\(trellis VERSION ([0-9.]+)", cml).group(1)
    rc, out, err = run("--version")
    assert rc == 0 and out == f"trellis {want}\n" and err == "", (rc, out, err)

# ---- engine flags: one table, the same spelling, bounds and errors in
# every command that starts an engine (app/common/engine_flags.h) ----

# each command, with what it needs before its flags; every run below stops
# at a flag error, before any model loads
ENGINE_COMMANDS = {"serve": ["serve"], "generate": ["generate", "-p", "x"],
                   "run": ["run", "x.tr"], "bench serve": ["bench", "serve"],
                   "bench grammar": ["bench", "grammar"]}

def engine_block(cmd):
    rc, out, err = run(*cmd, "--help")
    assert rc == 0, (cmd, err)
    i = out.find("\n\nengine options")
    assert i >= 0, (cmd, out)
    j = out.find("\n\n", i + 2)  # generate's epilog follows
    return out[i + 2:j if j >= 0 else len(out)]

def engine_int_flags():
    """{flag: (min, max)} as generate's --help states them (the engine's
    table: "0..512", or "1 or more" up to the int32 limit)."""
    flags = {}
    for l in help_entries(engine_block(["generate"])):
        m = re.match(r"  (?:-\w, )?(--[a-z-]+) [A-Za-z]+ .*?; (-?\d+)(?:\.\.(-?\d+)| or more)", l)
        if m:
            flags[m.group(1)] = (int(m.group(2)), int(m.group(3)) if m.group(3) else 2**31 - 1)
    return flags

@case
def engine_flags_same_everywhere():
    flags = engine_int_flags()
    assert set(flags) == {"--threads", "--ctx", "--kv-mem", "--page-size", "--max-running",
                          "--max-batch-tokens", "--chunk-size", "--spec-ngram",
                          "--kv-cache-disk-mb", "--spec-draft"}, flags
    assert flags["--spec-ngram"] == (0, 32), flags
    assert flags["--spec-draft"] == (1, 16), flags
    assert flags["--threads"] == (0, 512) and flags["--page-size"] == (1, 4096), flags
    assert flags["--max-batch-tokens"] == (1, 65536), flags
    # --help: the same engine flags, bounds and help everywhere (only a
    # command's defaults may differ: bench runs 2 threads)
    strip = lambda b: re.sub(r" \(default: (?:[^()]|\([^()]*\))*\)", "", " ".join(help_entries(b)))
    ref = strip(engine_block(["generate"]))
    for cmd in ENGINE_COMMANDS.values():
        assert strip(engine_block(cmd)) == ref, cmd
    for name, cmd in ENGINE_COMMANDS.items():
        for flag, (lo, hi) in flags.items():
            # min and max accepted: the parse goes on to the next flag
            for v in (lo, hi):
                rc, out, err = run(*cmd, flag, str(v), "--no-such-flag")
                assert rc == 2 and err == f"trellis {name}: unknown option '--no-such-flag' " \
                    f"(see trellis {name} --help)\n", (cmd, flag, v, err)
            # one past either bound refused, with the same message
            for v in (lo - 1, hi + 1):
                rc, out, err = run(*cmd, flag, str(v))
                assert rc == 2 and err == f"trellis {name}: {flag}: must be between {lo} and " \
                    f"{hi}, got {v}\n", (cmd, flag, v, err)
        for args, msg in ((["--load", "fast"], "--load: unknown value 'fast' (auto, mmap or read)"),
                          (["-t", "513"], "-t: must be between 0 and 512, got 513"),
                          (["-c", "-1"], "-c: must be between 0 and 2147483647, got -1"),
                          (["--no-radix=1"], "--no-radix: takes no value"),
                          (["--device"], "--device: needs a value"),
                          (["--kv-mb", "64"], "unknown option '--kv-mb'")):
            rc, out, err = run(*cmd, *args)
            assert rc == 2 and err.startswith(f"trellis {name}: {msg}"), (cmd, args, err)

# ---- what generate gained from the engine ----

@case
def stop_strings():
    rc, out, err = run("generate", "-p", "1, 2, 3, 4,", "-n", "40", "--stop", " 7", "--stop", "zzz", "--json")
    assert rc == 0, err
    o = json.loads(out)
    assert o["finish_reason"] == "stop" and o["stop"] == " 7", o
    assert o["text"].startswith(" 5, 6,") and "7" not in o["text"], o
    rc, out, err = run("generate", "-p", "1, 2, 3, 4,", "-n", "40", "--stop", " 7")
    assert rc == 0 and out.rstrip("\n") == o["text"], (out, o["text"])

@case
def stop_regex():
    rc, out, err = run("generate", "-p", "1, 2, 3, 4,", "-n", "40", "--stop", "zzz",
                       "--stop-regex", " [6-9],", "--json")
    assert rc == 0, err
    o = json.loads(out)
    assert o["finish_reason"] == "stop" and o["stop"] == " [6-9],", o
    assert o["text"] == " 5,", o
    rc, out, err = run("generate", "-p", "x", "-n", "4", "--stop-regex", "a*")
    expect_error(rc, err, "stop_regex 0 matches the empty string")
    rc, out, err = run("generate", "-p", "x", "-n", "4", "--stop-regex", "(?=a)")
    expect_error(rc, err, "lookahead")

@case
def logprobs_in_json():
    rc, out, err = run("generate", "-p", "The capital of France is", "-n", "6", "--json", "--logprobs", "3")
    assert rc == 0, err
    o = json.loads(out)
    lp = o["logprobs"]
    assert len(lp) == len(o["tokens"]) == 6, o
    for tok, e in zip(o["tokens"], lp):
        assert e["id"] == tok and e["logprob"] <= 0 and len(e["top"]) == 3, e
        tops = [t["logprob"] for t in e["top"]]
        assert tops == sorted(tops, reverse=True), e
        assert e["top"][0]["id"] == tok and abs(e["top"][0]["logprob"] - e["logprob"]) < 1e-5, e  # greedy
    assert lp[0]["text"] == " Paris", lp[0]
    rc, out, err = run("generate", "-p", "The capital of France is", "-n", "2", "--json", "--logprobs", "0")
    assert rc == 0 and all(e["top"] == [] for e in json.loads(out)["logprobs"]), out
    rc, out, err = run("generate", "-p", "The capital of France is", "-n", "2", "--json")
    assert rc == 0 and "logprobs" not in json.loads(out), out

@case
def n_samples():
    base = ["-p", "Once upon a time", "-n", "12", "--temp", "1.0", "--seed", "5"]
    rc, out, err = run("generate", *base, "-N", "3", "--json")
    assert rc == 0, err
    lines = [json.loads(l) for l in out.splitlines()]
    assert [o["index"] for o in lines] == [0, 1, 2], out
    assert all(o["n_samples"] == 3 and o["finish_reason"] in ("stop", "length") for o in lines), lines
    assert len({tuple(o["tokens"]) for o in lines}) > 1, lines
    # sample i uses seed + i
    one = json.loads(run("generate", *base[:-1], "6", "--json")[1])
    assert one["tokens"] == lines[1]["tokens"], (one, lines[1])
    rc, out, err = run("generate", *base, "-N", "2")
    assert rc == 0 and "--- sample 1 of 2 ---" in out and "--- sample 2 of 2 ---" in out, out
    assert out.index("--- sample 1 of 2 ---") < out.index("--- sample 2 of 2 ---"), out
    rc, out, err = run("generate", "--chat", "-p", "Is fire hot?", "--choice", "yes", "--choice", "no",
                       "-N", "4", "--temp", "1.5", "--json")
    assert rc == 0 and all(json.loads(l)["text"] in ("yes", "no") for l in out.splitlines()), out

@case
def ignore_eos_with_a_constraint():
    # The old single-sequence loop stopped at an end-of-generation token
    # whenever a constraint was on, --ignore-eos or not. The engine obeys
    # --ignore-eos: the EOS the constraint allows (only once the text is
    # complete) is kept as an output token (it has no text) and the
    # constraint, now terminated, ends the sample with finish "stop".
    import re
    rx = "(red|green)( and blue)?"
    rc, out, err = run("generate", "--chat", "-p", "Pick a color.", "--regex", rx, "-n", "8", "--json",
                       "--ignore-eos")
    assert rc == 0, err
    o = json.loads(out)
    assert o["finish_reason"] == "stop" and re.fullmatch(rx, o["text"]) and o["constraint"]["accepted"], o
    assert "stop_token" not in o, o

@case
def end_span_rule():
    # plain masking (--end-span off, the old loop's way) holds a model that
    # wants to leave an unbounded span inside it until -n; the engine's
    # end-of-span rule (auto: on for a regex) lets it stop there
    import re
    base = ["--chat", "-p", "Name a person.", "--regex", "[A-Z][a-z]+", "-n", "12", "--temp", "0.8",
            "--seed", "3", "--json"]
    on = json.loads(run("generate", *base)[1])
    off = json.loads(run("generate", *base, "--end-span", "off")[1])
    assert re.fullmatch("[A-Z][a-z]+", on["text"]) and on["finish_reason"] == "stop", on
    assert re.fullmatch("[A-Z][a-z]+", off["text"]), off
    assert on["completion_tokens"] < off["completion_tokens"] == 12, (on, off)
    rc, out, err = run("generate", "-p", "x", "--end-span", "sometimes")
    expect_error(rc, err, "--end-span: unknown value 'sometimes' (auto, on or off)")

@case
def grammar_flags_work_or_say_why_not():
    for args in (["--json-object"], ["--json-schema", '{"type": "object"}'],
                 ["--json-schema", '{"type": "integer"}', "--schema-mode", "lenient", "--whitespace", "compact"],
                 ["--grammar", os.path.join(TMP, "g.gbnf")]):
        open(os.path.join(TMP, "g.gbnf"), "w").write('root ::= "yes" | "no"\n')
        rc, out, err = run("generate", "--chat", "-p", "Answer in JSON.", "-n", "32", "--json", *args)
        if rc == 0:
            o = json.loads(out)
            if args[0] == "--grammar":
                assert o["text"] in ("yes", "no"), o
            elif o["finish_reason"] == "stop":
                json.loads(o["text"])
        else:  # a kind the engine cannot compile yet (JSON Schema, EBNF)
            assert rc == 2 and err.startswith("trellis generate: " + args[0] + ": "), (args, rc, err)
    rc, out, err = run("generate", "-p", "x", "--json-schema", "/nonexistent/schema.json")
    assert rc != 0 and "--json-schema" in err, err
    # integers as plain digits by default; --json-numbers full compiles too
    for extra in ([], ["--json-numbers", "canonical"], ["--json-numbers", "full"]):
        rc, out, err = run("generate", "--chat", "-p", "Pi times 1000, as JSON.", "-n", "24",
                           "--json", "--temp", "0.9", "--seed", "5", "--json-schema",
                           '{"type": "array", "items": {"type": "integer"}, "maxItems": 3}',
                           *extra)
        assert rc == 0, (extra, err)
        o = json.loads(out)
        if extra[-1:] != ["full"]:
            assert not re.search(r"[0-9][.eE]|-0(?![0-9])", o["text"]), o

@case
def info_unrunnable_model_is_described():
    p = patched_model("arch2.gguf", [(b"\x05\x00\x00\x00\x00\x00\x00\x00llama", b"\x05\x00\x00\x00\x00\x00\x00\x00lamma")])
    rc, out, err = run("info", "-m", p)
    assert rc == 0, err
    assert "architecture:   lamma" in out and "runnable:       no:" in out, out
    assert "unsupported architecture 'lamma'" in out, out

@case
def bench_serve_and_grammar_run():
    rc, out, err = run("bench", "serve", "--workload", "random,json", "--concurrency", "2", "--radix", "on",
                       "--requests", "2", "--max-tokens", "4", "--prompt-min", "8", "--prompt-max", "8",
                       "--csv", os.path.join(TMP, "serve.csv"))
    assert rc == 0, err
    assert "random" in out and "json" in out, out
    assert open(os.path.join(TMP, "serve.csv")).read().count("\n") == 3
    pats = os.path.join(TMP, "pats.txt")
    open(pats, "w").write("# two patterns\n[a-z]+\n[0-9]{2,4}\n")
    rc, out, err = run("bench", "grammar", "--part", "micro", "--rounds", "1", "--reps", "1",
                       "--steps", "4", "--patterns", pats)
    assert rc == 0, err
    assert "regex compile" in out and "fill_mask" in out, out

@case
def regex_format_is_a_subset_of_python_re():
    """format "regex" takes a subset of the regexes Python's re compiles:
    2,000 random strings over regex characters, judged by re.compile, go
    through the MaskBench protocol; none that re refuses may pass."""
    import random, warnings
    rng = random.Random(7)
    alpha = list("ab09zAZ.^$*+?()[]{}|\\-/ ,:dwsSbBn") + [
        "(?:", "\\d", "\\w", "[a-z]", "{2,3}", "{3,1}", "[z-a]", "\\-", "\\/"]
    tests, seen = [], set()
    while len(tests) < 2000:
        s = "".join(rng.choice(alpha) for _ in range(rng.randint(0, 12)))
        if s in seen:
            continue
        seen.add(s)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                re.compile(s)
                ok = True
            except re.error:
                ok = False
        tests.append({"data": s, "valid": ok})
    path, csv_out = os.path.join(TMP, "rx.jsonl"), os.path.join(TMP, "rx.csv")
    with open(path, "w") as f:
        json.dump({"id": "regex", "schema": {"type": "string", "format": "regex"},
                   "tests": tests}, f)
    rc, out, err = run("bench", "maskbench", path, "--fork-each", "--csv", csv_out)
    assert rc == 0, err
    import csv
    row = next(csv.DictReader(open(csv_out)))
    assert int(row["invalid_accepted"]) == 0, row
    assert int(row["invalid_ok"]) > 1000 and int(row["valid_ok"]) > 300, row

passed = sum(1 for _, e in results if e is None)
failed = len(results) - passed
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
