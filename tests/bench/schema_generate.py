#!/usr/bin/env python3
"""JSON Schema generation with the real model through `trellis serve` (issue 14's engine checks).

  schema_generate.py [--bin build/trellis | --url URL] [--model GGUF] [--data FILE.jsonl.gz]
                     [--schemas N] [--concurrency C] [--max-tokens M] [--parts validity,throughput,jump]
                     [--threads T] [--json OUT] [--quick]

Starts `trellis serve` on a free port (or uses --url), then:

validity    one chat request per dev schema (N spread evenly over the file, default 200) with
            response_format {"type": "json_schema", "json_schema": {"schema": S, "strict": true}}
            (the server always compiles strictly: what the compiler cannot enforce is a 400),
            greedy and at temperature 0.8 (seeded), max_tokens M (default 256), C in flight
            (default 32). Every output that finished (finish_reason "stop") is parsed and
            validated with Python's `jsonschema` (the validator the schema's $schema names,
            Draft 2020-12 when it names none) with its format checker: the compiler enforces
            `format` (grammar/README.md). Reports schemas, compiled, refused (400, by reason),
            finished, valid among finished (target 100%), cut by max_tokens. Any invalid
            finished output, or any answer other than 200/400, is a failure (exit 1).
throughput  32 streams (C): constrained (json_schema, greedy) against
            unconstrained at equal token counts: the same prompts, each unconstrained request
            asked for exactly the tokens its constrained twin produced (max_tokens = that,
            ignore_eos). Radix cache flushed before each side, grammars compiled beforehand
            (a 1-token pass), so both sides do the same prefill and decode the same number of
            tokens; output tok/s = tokens / wall time, sides alternated over --tp-rounds
            (default 2). Target: constrained >= 0.95x.
jump        schemas with fixed keys (every listed property required, no other properties: the
            key names are forced text), greedy, C in flight, with jump-forward on and off (the
            per-request `jump_forward` field). Forward passes per sequence come from /metrics:
            completion tokens minus trellis_forward_passes_saved_total (each step that feeds a
            sequence m tokens at once is one pass, not m). Reports passes on and off, passes per
            output byte, and the cut (target >= 30%). --jump-outputs FILE keeps the outputs made
            without it: tests/bench/bench_forced reads them for the most any jump-forward
            could cut on them.

--quick (ctest `schema_generate_quick`, label model): validity only, 10 schemas, max_tokens 128;
asserts that every finished output validates and that something finished.

Figures depend on the machine's load: on a shared machine label them noisy. Rerun on a quiet
machine from the repository root, after `cmake --build build`:

  python3 tests/bench/schema_generate.py --bin build/trellis --schemas 200 \\
      --parts validity,throughput,jump --json /tmp/schema_generate.json
  python3 tests/bench/schema_generate.py --bin build/trellis --quick     # the ctest

(On a loaded 2-core machine the whole default run takes well over an hour; the noisy run
behind the current figures used --max-tokens 128 --jump-schemas 32 --tp-requests 32.)

Needs `jsonschema` (the server e2e venv has it: BUILD/e2e-venv/bin/python; the script re-runs
itself there when the interpreter lacks it).
"""

import argparse
import concurrent.futures as cf
import gzip
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The 135M model echoes a schema it is shown as the answer's content unless told not to.
SYSTEM = ("You write JSON data. Reply with one short JSON value that is valid against the "
          "user's JSON Schema: an example instance, never the schema itself.")
MODEL_ID = ["default"]  # the served model's id, from /v1/models


def need_jsonschema(build_dir):
    """Imports jsonschema, or re-runs this script under the server e2e venv's interpreter."""
    try:
        import jsonschema  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(build_dir, "e2e-venv", "bin", "python")
    if os.path.exists(py) and os.path.realpath(py) != os.path.realpath(sys.executable):
        os.execv(py, [py] + sys.argv)
    if os.environ.get("TRELLIS_SCHEMA_VENV") != "made":
        venv = os.path.join(build_dir, "e2e-venv")
        subprocess.check_call([sys.executable, "-m", "venv", venv])
        subprocess.check_call([os.path.join(venv, "bin", "pip"), "install", "-q",
                               "--disable-pip-version-check", "openai", "jsonschema", "pytest"])
        os.environ["TRELLIS_SCHEMA_VENV"] = "made"
        os.execv(py, [py] + sys.argv)
    sys.exit("schema_generate: cannot import jsonschema")


def shared_dir():
    env = os.environ.get("TRELLIS_SHARED")
    if env:
        return env
    for up in ("..", os.path.join("..", "..")):
        d = os.path.normpath(os.path.join(ROOT, up, "shared"))
        if os.path.isdir(d):
            return d
    return os.path.normpath(os.path.join(ROOT, "..", "shared"))


def default_model():
    if os.environ.get("TRELLIS_MODEL"):
        return os.environ["TRELLIS_MODEL"]
    cache = os.environ.get("TRELLIS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trellis")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


# ---------------------------------------------------------------- data


def load_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def spread(rows, n):
    """n rows spread evenly over the file (it is grouped by source: BFCL, GitHub, Kubernetes...)."""
    if n >= len(rows):
        return list(rows)
    step = len(rows) / n
    return [rows[int(i * step)] for i in range(n)]


def fixed_keys(schema):
    """An object schema whose keys are all listed and all required, nothing else allowed."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return False
    props = schema.get("properties")
    if not isinstance(props, dict) or len(props) < 2:
        return False
    if set(schema.get("required") or []) != set(props):
        return False
    if schema.get("additionalProperties", True) is not False:
        return False
    bad = ("patternProperties", "anyOf", "oneOf", "allOf", "$ref", "if", "not")
    return not any(k in schema for k in bad)


def prompt_for(schema):
    text = json.dumps(schema, ensure_ascii=False)
    # The grammar carries the schema; the prompt only hints at it. Prefill is most of the
    # run's time on a CPU (up to 150 KB dev schemas): 600 characters, about 200 tokens.
    if len(text) > 600:
        text = text[:600] + " ..."
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "JSON Schema:\n" + text + "\n\nA short example instance:"}]


# ---------------------------------------------------------------- HTTP


class Client:
    """One keep-alive connection per thread to the server."""

    def __init__(self, url, timeout=900):
        u = urllib.parse.urlparse(url)
        self.host, self.port, self.timeout = u.hostname, u.port or 80, timeout
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "c", None)
        if c is None:
            c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self.local.c = c
        return c

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(2):
            c = self._conn()
            try:
                c.request(method, path, body=data,
                          headers={"Content-Type": "application/json"} if data else {})
                r = c.getresponse()
                raw = r.read()
                return r.status, raw
            except (ConnectionError, http.client.HTTPException, OSError):
                c.close()
                self.local.c = None
                if attempt:
                    raise
        raise RuntimeError("unreachable")

    def json(self, method, path, body=None):
        st, raw = self.request(method, path, body)
        try:
            return st, json.loads(raw)
        except ValueError:
            return st, {"raw": raw.decode("utf-8", "replace")}

    def metrics(self):
        st, raw = self.request("GET", "/metrics")
        out = {}
        for line in raw.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, val = line.rpartition(" ")
                try:
                    out[name] = float(val)
                except ValueError:
                    pass
        return out


def start_server(a):
    port_file = tempfile.NamedTemporaryFile(prefix="trellis-port-", delete=False).name
    os.unlink(port_file)
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "--port-file", port_file,
           "--kv-mem", str(a.kv_mem), "--max-running", str(max(64, a.concurrency)),
           "--max-queue", "4096"]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("schema_generate: the server exited: " + proc.stderr.read().decode())
        if os.path.exists(port_file) and open(port_file).read().strip():
            port = int(open(port_file).read())
            cl = Client("http://127.0.0.1:%d" % port)
            try:
                if cl.request("GET", "/health")[0] == 200:
                    os.unlink(port_file)
                    return proc, "http://127.0.0.1:%d" % port
            except OSError:
                pass
        time.sleep(0.2)
    proc.kill()
    sys.exit("schema_generate: the server did not become ready in 120 s")


def chat_body(schema, temperature, seed, max_tokens, constrained=True, **extra):
    b = {"model": MODEL_ID[0], "messages": prompt_for(schema), "max_tokens": max_tokens,
         "temperature": temperature, "seed": seed}
    if constrained:
        b["response_format"] = {"type": "json_schema",
                                "json_schema": {"name": "s", "schema": schema, "strict": True}}
    b.update(extra)
    return b


def run_all(fn, items, concurrency, label=None):
    """fn over items, concurrency in flight, results in order; with a label, progress on stderr
    (a long run on a loaded machine shows it is moving)."""
    out = [None] * len(items)
    t0 = time.time()
    with cf.ThreadPoolExecutor(concurrency) as ex:
        futs = {ex.submit(fn, x): i for i, x in enumerate(items)}
        for done, f in enumerate(cf.as_completed(futs), 1):
            out[futs[f]] = f.result()
            if label and (done % 25 == 0 or done == len(items)):
                sys.stderr.write("%s: %d/%d in %.0f s\n" % (label, done, len(items),
                                                            time.time() - t0))
    return out


# ---------------------------------------------------------------- validity


def refusal_reason(msg):
    """A 400's message without its specifics (JSON pointer, values): the keyword and why, or
    the budget it names."""
    m = re.search(r'keyword "([^"]+)" cannot be enforced: ([^(;,]*)', msg)
    if m:
        return "%s: %s" % (m.group(1), m.group(2).strip()[:60])
    m = re.search(r"\b(max_\w+|time budget)", msg)
    if m:
        return "budget: " + m.group(1)
    msg = re.sub(r"^bad JSON Schema: (/\S*: )?", "", msg)
    return re.sub(r'"[^"]*"|\d+', "_", msg)[:70]


def make_validator(schema):
    import jsonschema
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def validity(a, cl, rows):
    temps = [(0.0, "greedy"), (0.8, "t0.8")]
    # a schema's two requests side by side: the second finds its prompt in the radix cache
    jobs = [(r, t, name) for r in rows for t, name in temps]

    def one(job):
        r, t, name = job
        st, o = cl.json("POST", "/v1/chat/completions",
                        chat_body(r["schema"], t, a.seed, a.max_tokens))
        res = {"id": r["id"], "temp": name, "status": st}
        if st == 200:
            ch = o["choices"][0]
            res["finish"] = ch["finish_reason"]
            res["text"] = ch["message"]["content"]
            res["tokens"] = o["usage"]["completion_tokens"]
        else:
            err = o.get("error") or {}
            res["code"] = err.get("code")
            res["message"] = err.get("message") or o.get("raw", "")
        return res

    t0 = time.time()
    results = run_all(one, jobs, a.concurrency, "validity")
    wall = time.time() - t0
    by_id = {r["id"]: r for r in rows}
    report = {"schemas": len(rows), "wall_s": round(wall, 1), "per_temp": {}, "refused": {},
              "invalid": [], "errors": []}
    refused_ids = set()
    for res in results:
        if res["status"] == 400:
            refused_ids.add(res["id"])
    for res in results:
        if res["status"] == 400 and res["temp"] == "greedy":
            reason = "%s: %s" % (res["code"], refusal_reason(res["message"]))
            report["refused"][reason] = report["refused"].get(reason, 0) + 1
    tokens = 0
    for _, name in temps:
        p = {"requests": 0, "refused": 0, "finished": 0, "valid": 0, "cut": 0, "other": 0}
        for res in (x for x in results if x["temp"] == name):
            p["requests"] += 1
            if res["status"] == 400:
                p["refused"] += 1
            elif res["status"] != 200:
                p["other"] += 1
                report["errors"].append({k: res.get(k) for k in ("id", "temp", "status", "message")})
            elif res["finish"] == "length":
                p["cut"] += 1
                tokens += res["tokens"]
            elif res["finish"] == "stop":
                p["finished"] += 1
                tokens += res["tokens"]
                why = check(by_id[res["id"]]["schema"], res["text"])
                if why is None:
                    p["valid"] += 1
                else:
                    report["invalid"].append({"id": res["id"], "temp": name, "why": why,
                                              "text": res["text"][:300]})
            else:
                p["other"] += 1
                report["errors"].append({"id": res["id"], "temp": name,
                                         "finish": res["finish"]})
        report["per_temp"][name] = p
    report["compiled"] = len(rows) - len(refused_ids)
    report["refused_total"] = len(refused_ids)
    report["completion_tokens"] = tokens
    return report


def check(schema, text):
    """None when text is a JSON instance of schema, else why not."""
    try:
        v = json.loads(text)
    except ValueError as e:
        return "not JSON: %s" % e
    try:
        err = next(iter(make_validator(schema).iter_errors(v)), None)
    except Exception as e:  # a schema the validator itself cannot handle
        return "validator failed: %r" % e
    return None if err is None else "%s at %s" % (err.message[:200], list(err.absolute_path))


def print_validity(rep, max_tokens):
    print("validity: %d schemas, %d compiled, %d refused (400), max_tokens %d, %.0f s (noisy)"
          % (rep["schemas"], rep["compiled"], rep["refused_total"], max_tokens, rep["wall_s"]))
    for name, p in rep["per_temp"].items():
        ran = p["requests"] - p["refused"]
        pct = 100.0 * p["valid"] / p["finished"] if p["finished"] else float("nan")
        print("  %-6s  ran %3d  finished %3d  valid %3d (%.1f%% of finished)  cut by max_tokens "
              "%3d  other %d" % (name, ran, p["finished"], p["valid"], pct, p["cut"], p["other"]))
    if rep["refused"]:
        print("  refusals by reason:")
        for reason, n in sorted(rep["refused"].items(), key=lambda kv: -kv[1]):
            print("    %3d  %s" % (n, reason))
    for bad in rep["invalid"]:
        print("  INVALID %s (%s): %s\n    %s" % (bad["id"], bad["temp"], bad["why"], bad["text"]))
    for e in rep["errors"][:10]:
        print("  ERROR %s" % e)


# ---------------------------------------------------------------- throughput


def throughput(a, cl, rows):
    """Constrained vs unconstrained output tok/s at 32 streams, equal token counts."""
    rows = rows[: a.tp_requests]
    # grammars compiled (and refused ones dropped) before anything is timed
    warm = run_all(lambda r: (r, cl.json("POST", "/v1/chat/completions",
                                         chat_body(r["schema"], 0, a.seed, 1))[0]),
                   rows, a.concurrency)
    rows = [r for r, st in warm if st == 200]

    def side(constrained, lengths):
        cl.request("POST", "/flush_cache")

        def one(r):
            if constrained:
                body = chat_body(r["schema"], 0, a.seed, a.max_tokens)
            else:
                body = chat_body(r["schema"], 0, a.seed, lengths[r["id"]], constrained=False,
                                 ignore_eos=True)
            st, o = cl.json("POST", "/v1/chat/completions", body)
            if st != 200:
                raise RuntimeError("throughput: %d %s" % (st, o))
            return r["id"], o["usage"]["completion_tokens"]

        t0 = time.time()
        out = run_all(one, rows, a.concurrency)
        return time.time() - t0, dict(out)

    # rounds alternate the sides, so that a load that drifts over the run hits both alike
    t_con = t_free = 0.0
    n_con = n_free = 0
    for _ in range(a.tp_rounds):
        t, lengths = side(True, None)
        t_con, n_con = t_con + t, n_con + sum(lengths.values())
        t, got = side(False, lengths)
        t_free, n_free = t_free + t, n_free + sum(got.values())
    rep = {"requests": len(rows), "rounds": a.tp_rounds, "concurrency": a.concurrency,
           "constrained": {"tokens": n_con, "wall_s": round(t_con, 2),
                           "tok_s": round(n_con / t_con, 1)},
           "unconstrained": {"tokens": n_free, "wall_s": round(t_free, 2),
                             "tok_s": round(n_free / t_free, 1)}}
    rep["ratio"] = round((n_con / t_con) / (n_free / t_free), 3)
    return rep


def print_throughput(rep):
    c, u = rep["constrained"], rep["unconstrained"]
    print("throughput at %d streams, %d requests x %d rounds (noisy): constrained %d tokens in %.1f s = %.1f "
          "tok/s; unconstrained %d tokens in %.1f s = %.1f tok/s; ratio %.3f (target >= 0.95)"
          % (rep["concurrency"], rep["requests"], rep["rounds"], c["tokens"], c["wall_s"], c["tok_s"],
             u["tokens"], u["wall_s"], u["tok_s"], rep["ratio"]))


# ---------------------------------------------------------------- jump-forward


def jump(a, cl, rows):
    rows = [r for r in rows if fixed_keys(r["schema"])][: a.jump_schemas]

    def side(jf):
        cl.request("POST", "/flush_cache")
        m0 = cl.metrics()

        def one(r):
            st, o = cl.json("POST", "/v1/chat/completions",
                            chat_body(r["schema"], 0, a.seed, a.max_tokens, jump_forward=jf,
                                      whitespace=a.whitespace))
            if st == 400:
                return None
            if st != 200:
                raise RuntimeError("jump: %d %s" % (st, o))
            text = o["choices"][0]["message"]["content"]
            return o["usage"]["completion_tokens"], len(text.encode()), r["schema"], text

        t0 = time.time()
        out = [x for x in run_all(one, rows, a.concurrency) if x]
        wall = time.time() - t0
        if a.jump_outputs and not jf:  # for tests/bench/bench_forced.c
            with open(a.jump_outputs, "w") as f:
                for t, _, sc, text in out:
                    f.write(json.dumps({"schema": sc, "text": text, "completion_tokens": t}) + "\n")
        m1 = cl.metrics()

        def d(k):
            return m1.get(k, 0) - m0.get(k, 0)

        tokens = sum(x[0] for x in out)
        saved = d("trellis_forward_passes_saved_total")
        return {"requests": len(out), "tokens": tokens, "bytes": sum(x[1] for x in out),
                "forced_tokens": d("trellis_jump_forward_tokens_total"), "saved": saved,
                "passes": tokens - saved, "engine_steps": d("trellis_engine_steps_total"),
                "wall_s": round(wall, 2)}

    on, off = side(True), side(False)
    rep = {"schemas": len(rows), "on": on, "off": off}
    if off["passes"] and on["bytes"] and off["bytes"]:
        rep["cut"] = round(1 - on["passes"] / off["passes"], 3)
        rep["cut_per_byte"] = round(1 - (on["passes"] / on["bytes"])
                                    / (off["passes"] / off["bytes"]), 3)
    return rep


def print_jump(rep):
    on, off = rep["on"], rep["off"]
    print("jump-forward on %d fixed-key schemas, greedy: forward passes per sequence %d on vs %d "
          "off (%d vs %d output bytes; %d tokens forced); cut %.1f%% (per output byte %.1f%%; "
          "target >= 30%%); engine steps %d vs %d (noisy)"
          % (rep["schemas"], on["passes"], off["passes"], on["bytes"], off["bytes"],
             on["forced_tokens"], 100 * rep.get("cut", float("nan")),
             100 * rep.get("cut_per_byte", float("nan")), on["engine_steps"],
             off["engine_steps"]))


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "trellis"))
    ap.add_argument("--url", help="an already running server (no server started)")
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--data", help="schemas, MaskBench rows (.jsonl or .jsonl.gz; default: "
                    "the dev set in ../shared/data, or with --quick this tree's "
                    "tests/data/schema/quick.jsonl, so that the ctest needs nothing outside it)")
    ap.add_argument("--schemas", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--kv-mem", type=int, default=1536, help="MiB (32 streams of ~900 tokens)")
    ap.add_argument("--parts", default="validity")
    ap.add_argument("--tp-requests", type=int, default=64)
    ap.add_argument("--tp-rounds", type=int, default=2, help="constrained, unconstrained, ...")
    ap.add_argument("--jump-schemas", type=int, default=64)
    ap.add_argument("--jump-outputs", help="jump: write the outputs without jump-forward here "
                    "(JSON lines: schema, text, completion_tokens), for tests/bench/bench_forced")
    ap.add_argument("--whitespace", default="flexible", choices=["flexible", "compact", "pretty"],
                    help="the jump part's JSON whitespace (the server's `whitespace` extension)")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--quick", action="store_true", help="the ctest: 10 schemas, validity")
    a = ap.parse_args()
    need_jsonschema(os.path.dirname(os.path.abspath(a.bin)))
    if a.quick:
        a.schemas, a.max_tokens, a.parts = 10, 128, "validity"
    if not a.data:
        a.data = (os.path.join(ROOT, "tests", "data", "schema", "quick.jsonl") if a.quick else
                  os.path.join(shared_dir(), "data", "maskbench-dev.jsonl.gz"))
    parts = a.parts.split(",")
    if not a.url and not os.path.exists(a.model):
        # label `model`: the model is part of every test run, so this fails
        print("schema_generate: no model at %s (scripts/setup.sh fetches it)" % a.model)
        sys.exit(1)
    all_rows = load_rows(a.data)
    rows = spread(all_rows, a.schemas)
    proc = None
    url = a.url
    if not url:
        proc, url = start_server(a)
    cl = Client(url)
    st, models = cl.json("GET", "/v1/models")
    if st == 200 and models.get("data"):
        MODEL_ID[0] = models["data"][0]["id"]
    out = {"schemas": len(rows), "data": os.path.basename(a.data)}
    ok = True
    try:
        if "validity" in parts:
            rep = validity(a, cl, rows)
            print_validity(rep, a.max_tokens)
            out["validity"] = rep
            finished = sum(p["finished"] for p in rep["per_temp"].values())
            ok = ok and not rep["invalid"] and not rep["errors"] and finished > 0
            if a.quick:  # this tree's own schemas: every one compiles, most finish
                # (finished counts both temperatures: at least half of the runs)
                ok = ok and rep["refused_total"] == 0 and finished >= rep["compiled"]
        if "throughput" in parts:
            rep = throughput(a, cl, spread(all_rows, max(a.schemas, a.tp_requests)))
            print_throughput(rep)
            out["throughput"] = rep
        if "jump" in parts:
            rep = jump(a, cl, all_rows)
            print_jump(rep)
            out["jump"] = rep
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    print("schema_generate: %s" % ("ok" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
