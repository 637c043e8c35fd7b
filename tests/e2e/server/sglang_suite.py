"""SGLang's own tests against a running `trellis serve`: the frontend
language's test programs (sglang/test/test_programs.py, called as SGLang's
test/lang/test_srt_backend.py calls them) through `RuntimeEndpoint`, and
the server kits (sglang/test/kits/*_kit.py: mixins that a test class
binds to a server's URL), each test run as a user of SGLang would run it.

Run by sglang_suite.sh, which installs the `sglang` package (no
dependencies: torch, triton and a few heavy imports are stubbed, since the
frontend and the kits only send HTTP requests) into a venv and starts the
server. Prints one line per test (PASS / FAIL / ERROR with the reason's
first line) and a summary; --json FILE writes the same as JSON.
Exit status: 0 always unless --strict (then 1 if any test in --expect-pass
failed), because which tests can pass depends on the model's answers.
"""
import argparse
import importlib
import inspect
import json
import os
import pkgutil
import sys
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sglang_stub  # noqa: E402,F401  (before sglang: stubs torch & co)

import sglang as sgl  # noqa: E402


def first_line(e):
    s = "".join(traceback.format_exception_only(type(e), e)).strip()
    return s.splitlines()[-1][:300] if s else type(e).__name__


def run_programs(url, results):
    from sglang.test import test_programs as tp
    backend = sgl.RuntimeEndpoint(url, chat_template_name="chatml")
    sgl.set_default_backend(backend)
    for name, fn in sorted(inspect.getmembers(tp, inspect.isfunction)):
        if not name.startswith("test_") or fn.__module__ != tp.__name__:
            continue
        kwargs = {}
        params = inspect.signature(fn).parameters
        if "check_answer" in params:
            kwargs["check_answer"] = False  # answers of a 135M model
        t0 = time.time()
        try:
            fn(**kwargs)
            status, why = "PASS", ""
        except AssertionError as e:
            status, why = "FAIL", first_line(e)
        except Exception as e:  # noqa: BLE001 - report every failure
            status, why = "ERROR", first_line(e)
        results.append({"suite": "test_programs", "test": name, "status": status,
                        "why": why, "seconds": round(time.time() - t0, 1)})
        print(f"{status:5} test_programs.{name} {why}", flush=True)


def kit_classes():
    import sglang.test.kits as kits
    for m in pkgutil.iter_modules(kits.__path__):
        if not m.name.endswith("_kit") and not m.name.endswith("_kits"):
            continue
        try:
            mod = importlib.import_module(f"sglang.test.kits.{m.name}")
        except Exception as e:  # noqa: BLE001
            yield m.name, None, e
            continue
        for cname, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ != mod.__name__ or not (cname.endswith("Mixin") or cname.endswith("Kit")):
                continue
            yield m.name, cls, None


def kit_bindings(url, model):
    """What SGLang's concrete test classes give a kit: the server's URL and
    model, an OpenAI client, flush_cache, the chunk size of chunked
    prefill. Kits that need more (the server process, a Hugging Face
    tokenizer) fail and are reported as such."""
    import requests

    def flush_cache(cls=None):
        requests.post(url + "/flush_cache", timeout=30).raise_for_status()

    b = {"base_url": url, "model": model, "api_key": None,
         "flush_cache": classmethod(flush_cache), "cache_chunk_size": 64}
    try:
        import openai
        b["client"] = openai.Client(base_url=url + "/v1", api_key="none")
    except ImportError:
        pass
    return b


def served_model(url):
    import requests
    r = requests.get(url + "/v1/models", timeout=30)
    r.raise_for_status()
    return r.json()["data"][0]["id"]


class _Collect(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.rows = []

    def addSuccess(self, test):
        self.rows.append((test, "PASS", ""))

    def addFailure(self, test, err):
        self.rows.append((test, "FAIL", first_line(err[1])))

    def addError(self, test, err):
        self.rows.append((test, "ERROR", first_line(err[1])))

    def addSkip(self, test, reason):
        self.rows.append((test, "SKIP", reason))


def run_kits(url, model, results, only):
    for kit, cls, err in kit_classes():
        if only and kit not in only:
            continue
        if err is not None:
            results.append({"suite": kit, "test": "(import)", "status": "ERROR", "why": first_line(err)})
            print(f"ERROR {kit} (import) {first_line(err)}", flush=True)
            continue
        bases = (cls,) if issubclass(cls, unittest.TestCase) else (cls, unittest.TestCase)
        try:
            case = type(f"Trellis{cls.__name__}", bases, kit_bindings(url, model))
        except TypeError as e:
            results.append({"suite": kit, "test": "(bind)", "status": "ERROR", "why": first_line(e)})
            print(f"ERROR {kit} (bind) {first_line(e)}", flush=True)
            continue
        names = unittest.TestLoader().getTestCaseNames(case)
        for n in names:
            res = _Collect()
            t0 = time.time()
            try:
                case(n).run(res)
            except Exception as e:  # noqa: BLE001
                res.rows.append((None, "ERROR", first_line(e)))
            for _, status, why in res.rows:
                results.append({"suite": f"{kit}.{cls.__name__}", "test": n, "status": status,
                                "why": why, "seconds": round(time.time() - t0, 1)})
                print(f"{status:5} {kit}.{cls.__name__}.{n} {why}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", help="default: the one the server serves")
    ap.add_argument("--json")
    ap.add_argument("--kits", default="", help="comma-separated kit modules (default: all)")
    ap.add_argument("--no-programs", action="store_true")
    ap.add_argument("--no-kits", action="store_true")
    a = ap.parse_args()
    results = []
    a.model = a.model or served_model(a.url)
    if not a.no_programs:
        run_programs(a.url, results)
    if not a.no_kits:
        run_kits(a.url, a.model, results, set(filter(None, a.kits.split(","))))
    counts = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("summary:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
