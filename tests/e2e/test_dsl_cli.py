#!/usr/bin/env python3
"""End-to-end tests of `trellis run` (the DSL, frontend/) on the default model.

    python3 tests/e2e/test_dsl_cli.py BUILD_DIR

The samples parse and run; --json, --batch (lines in input order),
--stream and --stats print what they promise; every bad input (a script
that does not parse, a run-time error, a bad flag, a bad batch line, an
unreachable server) gives a clear message on stderr with the script
location and a caret where there is one, and exit 2 (usage, parse) or 1
(run), never a signal or a hang. Prints 'N passed, N failed'.
"""
import json, os, subprocess, sys, tempfile

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
TRELLIS = os.path.join(BUILD, "trellis")
HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "..", "..", "samples", "dsl")
TMP = tempfile.mkdtemp(prefix="trellis-dsl-e2e-")
ENGINE = ["--threads", "2", "--kv-mem", "128"]
results = []


def run(*args, timeout=600):
    p = subprocess.run([TRELLIS, "run", *args], capture_output=True, timeout=timeout)
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


def script(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def sample(name):
    return os.path.join(SAMPLES, name)


@case
def samples_parse():
    for name in sorted(os.listdir(SAMPLES)):
        if name.endswith(".tr"):
            rc, out, err = run(sample(name), "--check")
            assert rc == 0 and out.endswith(": ok\n"), (name, rc, err)


@case
def parse_error_has_caret():
    path = script("bad.tr", 'fn main() {\n  user { "hi" }\n  gen x(max_tokens=)\n}\n')
    rc, out, err = run(path)
    assert rc == 2, (rc, err)
    assert f"{path}:3:20: error: expected a value, found ')'" in err, err
    assert "    3 |   gen x(max_tokens=)\n      |                    ^\n" in err, err


@case
def runtime_error_located():
    path = script("undef.tr", 'fn main() {\n  user { "value: {nope}" }\n}\n')
    rc, out, err = run(path, *ENGINE)
    assert rc == 1, (rc, err)
    assert f"{path}:2:19: error: undefined variable 'nope'" in err, err
    assert "^" in err and "in main" in err


@case
def usage_errors():
    for args, needle in [((), "no SCRIPT given"),
                         ((sample("chain.tr"), "--bogus"), "unknown option '--bogus'"),
                         ((sample("chain.tr"), "--arg", "novalue"), "NAME=VALUE"),
                         ((sample("chain.tr"), "--parallel", "0"),
                          "--parallel: must be between 1 and 4096, got 0"),
                         ((sample("chain.tr"), "-t", "99999"), "-t: must be between 0 and 512, got 99999"),
                         ((sample("chain.tr"), "--kv-mem", "0"),
                          "--kv-mem: must be between 1 and 2147483647, got 0"),
                         ((sample("chain.tr"), "extra", "arguments"), "unexpected argument 'arguments'"),
                         ((sample("chain.tr"), "-m", "x.gguf", "--server", "http://h:1"),
                          "not both"),
                         (("/nonexistent/x.tr",), "cannot open /nonexistent/x.tr"),
                         ((sample("chain.tr"), "nofn"), "has no function 'nofn'")]:
        rc, out, err = run(*args)
        assert rc == 2, (args, rc, err)
        assert needle in err, (args, err)


@case
def missing_argument():
    path = script("args.tr", 'fn main(a) { return a }\n')
    rc, out, err = run(path, *ENGINE)
    assert rc == 1 and "main needs the argument 'a' (--arg a=VALUE)" in err, err
    rc, out, err = run(path, "--arg", "a=x", "--arg", "b=y", *ENGINE)
    assert rc == 1 and "no parameter 'b'" in err, err


@case
def json_output_and_args():
    path = script("j.tr", 'fn main(n, s = "x") {\n  "Count: 1, 2,"\n'
                          '  gen next(regex=r" [0-9]", max_tokens=4)\n'
                          '  return {n: n + 1, s: s, next: next}\n}\n')
    rc, out, err = run(path, "--arg-json", "n=41", "--json", *ENGINE)
    assert rc == 0, err
    o = json.loads(out)
    assert o["return"]["n"] == 42 and o["return"]["s"] == "x"
    nxt = o["return"]["next"]
    assert len(nxt) == 2 and nxt[0] == " " and nxt[1].isdigit(), nxt
    assert o["vars"] == {"next": nxt}
    assert o["text"] == "Count: 1, 2," + nxt
    st = o["stats"]
    assert st["gens"] == 1 and st["prompt_tokens"] > 0 and 0 <= st["interp_overhead"] < 0.05, st


@case
def chain_streams():
    rc, out, err = run(sample("chain.tr"), "--arg", "question=How do I make tea?", "--stream",
                       "--stats", *ENGINE)
    assert rc == 0, err
    assert "[plan] " in out and "[answer] " in out, out
    assert "run: 2 gens" in err and "cached" in err, err


@case
def batch_in_order():
    lines = [json.dumps({"review": "I loved it."}), "", json.dumps({"review": "Awful."}),
             "not json", json.dumps(["a list"]), json.dumps({"review": "So-so."}),
             json.dumps({"oops": 1})]
    path = os.path.join(TMP, "in.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    rc, out, err = run(sample("fewshot_classify.tr"), "--batch", path, "--parallel", "3",
                       "--stats", *ENGINE)
    assert rc == 1, (rc, err)  # three inputs are bad
    got = [json.loads(l) for l in out.splitlines()]
    assert [g["index"] for g in got] == [0, 1, 2, 3, 4, 5], out
    for i in (0, 1, 4):
        assert got[i]["return"] in ("positive", "negative", "neutral"), got[i]
        assert got[i]["vars"] == {"label": got[i]["return"]}
    assert "line 4 is not JSON" in got[2]["error"]["message"], got[2]
    assert "line 5 is not a JSON object" in got[3]["error"]["message"], got[3]
    assert "no parameter 'oops'" in got[5]["error"]["message"], got[5]
    assert "batch: 6 inputs, 3 ok, 3 failed" in err, err


@case
def tree_of_thought_cache():
    rc, out, err = run(sample("tree_of_thought.tr"), "--arg-json", "width=2",
                       "--arg-json", "depth=2", "--json", *ENGINE)
    assert rc == 0, err
    o = json.loads(out)
    assert len(o["return"]["rating"]) == 2 and len(o["return"]["rating"][0]) == 2
    assert all(r in "123456789" for row in o["return"]["rating"] for r in row)
    assert o["stats"]["cache_hit_rate"] > 0.8, o["stats"]


@case
def unreachable_server():
    rc, out, err = run(sample("chain.tr"), "--server", "http://127.0.0.1:9", timeout=60)
    assert rc == 1, (rc, err)
    assert "cannot reach the server at http://127.0.0.1:9" in err, err


@case
def remote_engine_flags_refused():
    for flag in (["--no-radix"], ["--threads", "2"], ["--kv-mem", "64"], ["--load", "mmap"]):
        rc, out, err = run(sample("chain.tr"), "--server", "http://127.0.0.1:9", *flag)
        assert rc == 2 and f"{flag[0]}: engine options are the server's" in err, (flag, err)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server():
    """`trellis serve` on a free loopback port, or None when this build has none."""
    import time, urllib.request
    port = free_port()
    p = subprocess.Popen([TRELLIS, "serve", "--port", str(port), "--threads", "2",
                          "--kv-mem", "128"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if p.poll() is not None:
            err = p.stderr.read().decode("utf-8", "replace")
            assert "unknown command" not in err, "this build has no `trellis serve`"
            raise AssertionError(f"trellis serve exited: {err}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return p, url
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.5)
    p.kill()
    raise AssertionError("trellis serve did not become healthy")


def remote_case(fn):
    """A case that needs the server: started once, for all of them."""
    REMOTE.append(fn)
    return fn


REMOTE = []


@remote_case
def remote_same_as_in_process(url):
    args = (sample("chain.tr"), "--arg", "question=How do I make tea?")
    rc, local, err = run(*args, *ENGINE)
    assert rc == 0, err
    rc, remote, err = run(*args, "--server", url, "--chat-template", "chatml")
    assert rc == 0, err
    assert remote == local, (remote, local)  # greedy: the same tokens either way


@remote_case
def remote_batch_in_order(url):
    path = os.path.join(TMP, "remote.jsonl")
    reviews = ["Great fun.", "Dull.", "It was fine.", "Superb acting.", "Too long."]
    with open(path, "w") as f:
        f.write("\n".join(json.dumps({"review": r}) for r in reviews) + "\n")
    rc, out, err = run(sample("fewshot_classify.tr"), "--batch", path, "--server", url,
                       "--chat-template", "chatml", "--stats")
    assert rc == 0, err
    got = [json.loads(l) for l in out.splitlines()]
    assert [g["index"] for g in got] == list(range(len(reviews)))
    assert all(g["return"] in ("positive", "negative", "neutral") for g in got), got
    assert "batch: 5 inputs, 5 ok" in err, err


@remote_case
def remote_fork_and_constraints(url):
    rc, out, err = run(sample("tree_of_thought.tr"), "--arg-json", "width=2", "--arg-json",
                       "depth=2", "--json", "--server", url, "--chat-template", "chatml")
    assert rc == 0, err
    o = json.loads(out)
    assert all(r in "123456789" for row in o["return"]["rating"] for r in row), o["return"]
    assert o["stats"]["cached_tokens"] > 0, o["stats"]


@remote_case
def remote_template_from_server(url):
    """No --chat-template: the server's /model_info gives the GGUF's template text."""
    args = (sample("chain.tr"), "--arg", "question=How do I make tea?")
    rc, local, err = run(*args, *ENGINE)
    assert rc == 0, err
    rc, remote, err = run(*args, "--server", url)
    assert rc == 0, err
    assert remote == local, (remote, local)


@case
def remote_mode():
    p, url = start_server()
    try:
        for fn in REMOTE:
            fn(url)
            print(f"  ok {fn.__name__}")
    finally:
        p.terminate()
        p.wait(timeout=60)


failed = [n for n, e in results if e]
print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
