#!/usr/bin/env python3
"""End-to-end tests of `trellis bench ppl` on the default model.

    python3 tests/e2e/test_bench_ppl.py BUILD_DIR
    TRELLIS_BUILD=build python3 -m pytest tests/e2e/test_bench_ppl.py

On a generated text of ~900 tokens in windows of 64: a finite perplexity
above 1 is printed; --save-ref then --ref on the same settings agree on
every position; a reference from another --ctx, --chunks or text, or a
file that is not one, is refused with the field that differs (exit 2)
and a failed run leaves an existing reference alone; a missing, empty or
too short text, --ctx beyond the model's context and bad flags are clear
errors (exit 2). Needs the default model (scripts/setup.sh): without it
every case fails, as the other model tests do. Prints 'N passed, N failed'
when run as a script.
"""
import math, os, random, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = (sys.argv[1] if __name__ == "__main__" and len(sys.argv) > 1 else
         os.environ.get("TRELLIS_BUILD") or os.path.join(HERE, "..", "..", "build"))
TRELLIS = os.path.join(BUILD, "trellis")
TMP = tempfile.mkdtemp(prefix="trellis-ppl-e2e-")
CTX = "64"
ENGINE = ["-t", "2", "--kv-mem", "64"]


def run(*args, timeout=300):
    p = subprocess.run([TRELLIS, "bench", "ppl", *args], capture_output=True, timeout=timeout)
    err = p.stderr.decode("utf-8", "replace")
    assert "Sanitizer" not in err, err
    return p.returncode, p.stdout.decode("utf-8", "replace"), err


def expect_usage_error(rc, err, *needles):
    assert rc == 2, f"expected exit 2, got {rc}; stderr={err!r}"
    assert err.startswith("trellis bench ppl: "), err
    for n in needles:
        assert n in err, f"expected {n!r} in stderr: {err!r}"


def write(name, data):
    path = os.path.join(TMP, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(data)
    return path


def story(seed, sentences):
    """Plain English sentences from a seeded generator: the same text on
    every run, varied enough that the model is not certain of each token."""
    rng = random.Random(seed)
    who = ["The miller", "A young shepherd", "The old queen", "My neighbour", "The captain",
           "A tired student", "The baker's daughter", "Our teacher"]
    did = ["walked to the market", "wrote a long letter", "planted apple trees",
           "mended the broken fence", "sang by the river", "counted the silver coins",
           "read the newspaper", "cooked a warm soup"]
    when = ["in the morning", "after the storm", "before dinner", "on a quiet Sunday",
            "late at night", "while it rained", "during the winter", "at noon"]
    why = ["because the house was cold", "and nobody noticed", "as the bells rang",
           "to forget the trouble", "though the road was long", "for the first time"]
    return " ".join(f"{rng.choice(who)} {rng.choice(did)} {rng.choice(when)} "
                    f"{rng.choice(why)}." for _ in range(sentences)) + "\n"


TEXT = write("story.txt", story(1, 60))  # ~900 tokens: 14 windows of 64
OTHER = write("other.txt", story(2, 60))
_ref = {}


def ref(name="ref64.bin"):
    """The reference of TEXT at --ctx 64, made once."""
    if name not in _ref:
        path = os.path.join(TMP, name)
        rc, out, err = run("--text", TEXT, "--ctx", CTX, "--save-ref", path, *ENGINE)
        assert rc == 0, err
        _ref[name] = (path, out)
    return _ref[name]


def figures(out):
    m = re.search(r"^perplexity: ([0-9.]+|inf|nan) \+/- ([0-9.]+|inf|nan)", out, re.M)
    assert m, out
    return float(m.group(1)), float(m.group(2))


# ---- the figures ----

def test_perplexity_is_finite_and_above_one():
    path, out = ref()
    ppl, pm = figures(out)
    assert math.isfinite(ppl) and ppl > 1 and math.isfinite(pm) and pm > 0, out
    m = re.search(r"(\d+) tokens, (\d+) windows of 64 \(no BOS\), (\d+) scored tokens "
                  r"\(positions 32\.\.63 of each\)", out)
    assert m, out
    tokens, windows, scored = map(int, m.groups())
    assert 400 <= tokens < 2000 and windows == tokens // 64 and scored == windows * 32, out
    assert os.path.getsize(path) == 64 + 8 * scored
    assert "saved the reference: " + path in out, out


def test_same_settings_agree_on_every_position():
    path, first = ref()
    rc, out, err = run("--text", TEXT, "--ctx", CTX, "--ref", path, *ENGINE)
    assert rc == 0, err
    assert figures(out) == figures(first), (out, first)
    assert re.search(r"^agreement: 100\.000% \((\d+) of \1 positions", out, re.M), out
    assert re.search(r"^agreement without near-ties: 100\.000% .* >= 0\.5 nats", out, re.M), out
    assert "this run +0.000%" in out, out


def test_other_batching_agrees_too():
    # one thread, small steps: the engine's results do not depend on how
    # the windows were batched (kernels/backend.h, determinism)
    path, _ = ref()
    rc, out, err = run("--text", TEXT, "--ctx", CTX, "--ref", path, "-t", "1",
                       "--max-batch-tokens", "48", "--chunk-size", "16")
    assert rc == 0, err
    assert re.search(r"^agreement: 100\.000%", out, re.M), out


def test_chunks_limits_the_windows():
    rc, out, err = run("--text", TEXT, "--ctx", CTX, "--chunks", "2", *ENGINE)
    assert rc == 0, err
    assert ", 2 windows of 64" in out and "64 scored tokens" in out, out


# ---- references that do not fit ----

def test_ref_from_another_ctx_is_refused():
    path, _ = ref()
    rc, out, err = run("--text", TEXT, "--ctx", "32", "--ref", path, *ENGINE)
    expect_usage_error(rc, err, f"--ref: '{path}' was made with --ctx 64, this run uses --ctx 32")


def test_ref_from_another_text_is_refused_and_kept():
    path, _ = ref()
    before = open(path, "rb").read()
    # also --save-ref over it: a failed run must not replace the reference
    rc, out, err = run("--text", OTHER, "--ctx", CTX, "--ref", path, "--save-ref", path, *ENGINE)
    expect_usage_error(rc, err, f"--ref: '{path}' was made from another text or tokenizer")
    assert open(path, "rb").read() == before
    assert not os.path.exists(path + ".part")


def test_ref_with_other_chunks_is_refused():
    path, _ = ref()
    rc, out, err = run("--text", TEXT, "--ctx", CTX, "--chunks", "3", "--ref", path, *ENGINE)
    expect_usage_error(rc, err, "windows, this run scores 3 (--chunks must match)")


def test_not_a_ref_file_is_refused():
    rc, out, err = run("--text", TEXT, "--ref", TEXT)
    expect_usage_error(rc, err, "is not a reference file (write one with --save-ref)")
    path, _ = ref()
    cut = os.path.join(TMP, "cut.bin")
    open(cut, "wb").write(open(path, "rb").read()[:-3])
    rc, out, err = run("--text", TEXT, "--ctx", CTX, "--ref", cut)
    expect_usage_error(rc, err, "is damaged")
    rc, out, err = run("--text", TEXT, "--ref", os.path.join(TMP, "none.bin"))
    expect_usage_error(rc, err, "--ref: cannot read")


# ---- bad input ----

def test_missing_text_file():
    missing = os.path.join(TMP, "nonexistent.txt")
    rc, out, err = run("--text", missing)
    expect_usage_error(rc, err, f"--text: cannot read '{missing}': No such file or directory")


def test_text_required():
    rc, out, err = run("--ctx", CTX)
    expect_usage_error(rc, err, "--text: required")


def test_empty_and_bad_text():
    rc, out, err = run("--text", write("empty.txt", " \n\n"))
    expect_usage_error(rc, err, "is empty")
    bad = os.path.join(TMP, "latin1.txt")
    open(bad, "wb").write(b"caf\xe9 au lait")
    rc, out, err = run("--text", bad)
    expect_usage_error(rc, err, "--text: not valid UTF-8 (at byte 3)")


def test_text_shorter_than_one_window():
    rc, out, err = run("--text", write("short.txt", "Only a few words here."), "--ctx", CTX, *ENGINE)
    expect_usage_error(rc, err, "tokens, fewer than one window of --ctx 64")


def test_ctx_beyond_the_model():
    rc, out, err = run("--text", TEXT, "--ctx", "9000", *ENGINE)
    expect_usage_error(rc, err, "--ctx: the model's context is 8192 tokens, got 9000")


def test_unwritable_save_ref():
    path = os.path.join(TMP, "no", "such", "dir", "r.bin")
    rc, out, err = run("--text", TEXT, "--save-ref", path)
    expect_usage_error(rc, err, "--save-ref: cannot write")


def test_bad_flags_name_the_flag():
    for args, needle in ((["--ctx", "4"], "--ctx: must be between 8 and"),
                         (["-c", "x"], "-c: expects an integer, got 'x'"),
                         (["--chunks", "-1"], "--chunks: must be between 0 and"),
                         (["--near-tie", "-1"], "--near-tie: must be between 0 and 100"),
                         (["--near-tie", "0.1"], "--near-tie: needs --ref"),
                         (["--kv-type", "q3"], "--kv-type: unknown value 'q3'"),
                         (["-t", "1000"], "-t: must be between 0 and 512"),
                         (["--bogus"], "unknown option '--bogus'")):
        rc, out, err = run("-m", "/nonexistent/model.gguf", "--text", TEXT, *args)
        expect_usage_error(rc, err, needle)
        assert "model" not in err, (args, err)


if __name__ == "__main__":
    results = []
    for name, fn in list(globals().items()):
        if not name.startswith("test_") or not callable(fn):
            continue
        if os.environ.get("E2E_ONLY") and not re.search(os.environ["E2E_ONLY"], name):
            continue
        try:
            fn()
            results.append((name, None))
            print(f"PASS {name}")
        except Exception as e:  # noqa: BLE001 - report every failure
            results.append((name, e))
            print(f"FAIL {name}: {e!r}")
    passed = sum(1 for _, e in results if e is None)
    print(f"{passed} passed, {len(results) - passed} failed")
    sys.exit(1 if len(results) != passed else 0)
