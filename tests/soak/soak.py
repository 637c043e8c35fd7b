#!/usr/bin/env python3
"""Soak test for `trellis serve` (tests/soak/run.sh MINUTES; not in CI).

Starts the server, runs a mixed workload on CONCURRENCY client threads for
MINUTES (plain chat and completions, regex, choices, JSON Schema, EBNF,
tool calls (whole and streamed, each call's arguments checked), streaming, n > 1, requests cut by their client mid-stream or before the
answer, and a few bad requests that must be 400s), samples the server's RSS
after a warm-up and its /metrics page counts, then checks at the end:

  rss growth     last RSS sample vs the first after warm-up: < 5 %
  pages leaked   once idle, no page used by a sequence and free + cached
                 == total (the radix cache keeps pages; none is lost)
  errors         any unexpected status, malformed answer, output that
                 breaks its constraint, or a server that exits non-zero
                 on SIGTERM

Plain python3 (http.client, threads); no package needed."""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 150},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                  "maxItems": 3, "uniqueItems": True}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"]}}}
TOPICS = ["the sea", "a city at night", "prime numbers", "bread", "a lighthouse",
          "the moon", "rivers", "old maps", "trains", "winter"]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.errors = []

    def add(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def error(self, msg):
        with self.lock:
            if len(self.errors) < 50:
                self.errors.append(msg)
            self.counts["ERROR"] = self.counts.get("ERROR", 0) + 1


def post(port, path, body, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, raw


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(trellis_kv_pages_\w+|trellis_kv_disk_\w+|trellis_requests_\w+|"
                     r"trellis_http_connections|"
                     r"trellis_grammar_cache_bytes)\s+(\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def chat(topic):
    return [{"role": "user", "content": f"Write one sentence about {topic}."}]


def weather_args_ok(text):
    try:
        v = json.loads(text)
    except ValueError:
        return False
    return (isinstance(v, dict) and set(v) == {"city", "unit"} and isinstance(v["city"], str)
            and len(v["city"]) <= 20 and v["unit"] in ("c", "f"))


def sse_tool_calls(raw):
    """The calls of a streamed chat answer: [(name, arguments)], and whether the last
    one is complete (a stream cut by max_tokens may end inside a call)."""
    calls, finish = {}, None
    for line in raw.decode().splitlines():
        if not line.startswith("data: {"):
            continue
        for c in json.loads(line[6:]).get("choices", []):
            for tc in c.get("delta", {}).get("tool_calls") or []:
                d = calls.setdefault(tc["index"], ["", ""])
                d[0] += tc.get("function", {}).get("name", "")
                d[1] += tc.get("function", {}).get("arguments", "")
            finish = c.get("finish_reason") or finish
    return [tuple(calls[k]) for k in sorted(calls)], finish != "length"


def one_request(port, rng, st):
    kind = rng.choice(["plain", "plain", "completion_n", "regex", "choices", "schema",
                       "ebnf", "stream", "cut_stream", "cut_wait", "bad", "stop_regex",
                       "abort", "tools", "tools_stream"])
    topic = rng.choice(TOPICS)
    mt = rng.randint(4, 24)
    if kind == "plain":
        s, raw = post(port, "/v1/chat/completions", {"messages": chat(topic), "max_tokens": mt})
        ok = s == 200 and json.loads(raw)["choices"][0]["message"]["content"] is not None
    elif kind == "completion_n":
        s, raw = post(port, "/v1/completions", {"prompt": f"About {topic}:", "max_tokens": mt,
                                                "n": 3, "temperature": 0.8})
        ok = s == 200 and len(json.loads(raw)["choices"]) == 3
    elif kind == "regex":
        s, raw = post(port, "/v1/chat/completions", {"messages": chat(topic), "max_tokens": 16,
                                                     "regex": "[0-9]{3}-[a-z]{2,4}"})
        txt = json.loads(raw)["choices"][0]["message"]["content"] if s == 200 else ""
        fin = json.loads(raw)["choices"][0]["finish_reason"] if s == 200 else ""
        ok = s == 200 and (re.fullmatch("[0-9]{3}-[a-z]{2,4}", txt) or fin == "length")
    elif kind == "choices":
        opts = ["red", "green", "blue"]
        s, raw = post(port, "/v1/chat/completions", {"messages": chat(topic), "max_tokens": 8,
                                                     "choices": opts})
        ok = s == 200 and json.loads(raw)["choices"][0]["message"]["content"] in opts
    elif kind == "schema":
        s, raw = post(port, "/v1/chat/completions", {
            "messages": chat(topic), "max_tokens": 64,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "p", "schema": SCHEMA}}})
        ok = s == 200
        if ok:
            ch = json.loads(raw)["choices"][0]
            if ch["finish_reason"] == "stop":
                v = json.loads(ch["message"]["content"])
                # JSON Schema's integer includes 34.0 (a zero fraction)
                tags = v.get("tags", [])
                ok = set(v) - {"tags"} == {"name", "age"} and float(v["age"]).is_integer() \
                    and 0 <= v["age"] <= 150 and len(v["name"]) <= 12 \
                    and len(tags) <= 3 and len(set(tags)) == len(tags)
    elif kind == "ebnf":
        s, raw = post(port, "/v1/completions", {"prompt": f"{topic}:", "max_tokens": 12,
                                                "ebnf": 'root ::= "yes" | "no" | [0-9]+'})
        ok = s == 200
    elif kind in ("tools", "tools_stream"):  # every reported call valid under its schema
        body = {"messages": [{"role": "user", "content": f"What is the weather in {topic}?"}],
                "tools": [WEATHER_TOOL], "max_tokens": 60, "temperature": 0.8,
                "tool_choice": rng.choice(["auto", "required"]),
                "parallel_tool_calls": rng.random() < 0.5}
        if kind == "tools":
            s, raw = post(port, "/v1/chat/completions", body)
            ch = json.loads(raw)["choices"][0] if s == 200 else {}
            calls = [(c["function"]["name"], c["function"]["arguments"])
                     for c in (ch.get("message") or {}).get("tool_calls") or []]
            done = True
        else:
            s, raw = post(port, "/v1/chat/completions", dict(body, stream=True))
            calls, done = sse_tool_calls(raw) if s == 200 else ([], True)
        ok = s == 200 and all(name == "get_weather" and weather_args_ok(a) for name, a in
                              (calls if done else calls[:-1]))
    elif kind == "stop_regex":  # the text ends before the first sentence end
        s, raw = post(port, "/v1/completions", {"prompt": f"About {topic}:", "max_tokens": 40,
                                                "stop_regex": "[.!?]( |$)", "temperature": 0.8})
        ch = json.loads(raw)["choices"][0] if s == 200 else {}
        ok = s == 200 and (ch["finish_reason"] == "length" or
                           (ch["matched_stop"] == "[.!?]( |$)" and
                            not re.search("[.!?]( |$)", ch["text"])))
    elif kind == "abort":  # a long request aborted by rid from another connection
        rid = f"soak-{rng.getrandbits(48):x}"
        res = {}

        def run():
            res["r"] = post(port, "/generate", {"text": topic, "rid": rid, "sampling_params": {
                "max_new_tokens": 300, "ignore_eos": True}})
        th = threading.Thread(target=run)
        th.start()
        time.sleep(rng.uniform(0.05, 0.4))
        sa, _ = post(port, "/abort_request", {"rid": rid})
        th.join(300)
        s, raw = res.get("r", (0, b""))
        fin = json.loads(raw)["meta_info"]["finish_reason"]["type"] if s == 200 else ""
        ok = sa == 200 and s == 200 and fin in ("abort", "length")
        if s == 429:
            ok = True
    elif kind in ("stream", "cut_stream", "cut_wait"):
        body = json.dumps({"messages": chat(topic), "max_tokens": 200 if kind != "stream" else mt,
                           "stream": kind != "cut_wait", "ignore_eos": kind != "stream"}).encode()
        sk = socket.create_connection(("127.0.0.1", port), timeout=120)
        sk.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                   b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        if kind == "cut_wait":
            time.sleep(rng.uniform(0.05, 0.5))
        else:
            want = 3 if kind == "cut_stream" else None
            while True:
                b = sk.recv(65536)
                if not b:
                    break
                got += b
                if want and got.count(b"data: ") >= want:
                    break
        sk.close()
        ok = kind != "stream" or (got.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in got)
        s = 200
    else:  # bad requests must be clean 400s
        body = rng.choice([{"messages": "nope"},
                           {"messages": chat(topic), "regex": "(unclosed"},
                           {"messages": chat(topic), "max_tokens": -3},
                           {"messages": chat(topic), "response_format": {
                               "type": "json_schema", "json_schema": {"schema": {"type": 7}}}}])
        s, raw = post(port, "/v1/chat/completions", body)
        ok = s == 400
    if s == 429:
        st.add("429")
        return
    if not ok:
        st.error(f"{kind}: status {s}")
    st.add(kind)


def worker(port, seed, until, st):
    rng = random.Random(seed)
    while time.time() < until:
        try:
            one_request(port, rng, st)
        except Exception as e:  # noqa: BLE001 (every failure is reported)
            st.error(f"exception: {e!r}")


def wait_idle(port, timeout=120):
    deadline = time.time() + timeout
    m = metrics(port)
    while time.time() < deadline:
        m = metrics(port)
        if m.get("trellis_kv_pages_used", 1) == 0 and m.get("trellis_requests_running", 1) == 0 \
                and m.get("trellis_requests_in_flight", 1) == 0:
            return m, True
        time.sleep(0.2)
    return m, False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--warmup", type=float, default=0, help="seconds (default: 10%% of the run, >= 30 s)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--plot", help="write the RSS curve (after warm-up) here as a PNG")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="one more `trellis serve` argument (repeatable), e.g. "
                         "--server-arg=--spec-ngram --server-arg=8")
    a = ap.parse_args()
    total = a.minutes * 60
    warm = a.warmup or max(30.0, total / 10)
    d = tempfile.mkdtemp(prefix="trellis-soak-")
    port_file = os.path.join(d, "port")
    log = open(os.path.join(d, "log"), "w")
    cmd = [a.bin, "serve", "--port", "0", "--port-file", port_file, "--kv-mem", "64"]
    if a.model:
        cmd += ["-m", a.model]
    cmd += a.server_arg
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    while not (os.path.exists(port_file) and open(port_file).read().strip()):
        if proc.poll() is not None:
            sys.exit("server did not start: " + open(log.name).read())
        time.sleep(0.05)
    port = int(open(port_file).read())
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    m0 = metrics(port)
    st = Stats()
    t0 = time.time()
    until = t0 + total
    threads = [threading.Thread(target=worker, args=(port, i, until, st), daemon=True)
               for i in range(a.concurrency)]
    for t in threads:
        t.start()
    samples = []  # (seconds, rss KiB, pages used, pages free, grammar cache bytes)
    while time.time() < until:
        time.sleep(min(10, max(0.1, until - time.time())))
        el = time.time() - t0
        m = metrics(port)
        if el >= warm:
            samples.append((el, rss_kib(proc.pid), m.get("trellis_kv_pages_used"),
                            m.get("trellis_kv_pages_free"),
                            m.get("trellis_grammar_cache_bytes", 0)))
    for t in threads:
        t.join(timeout=600)
    m1, idle = wait_idle(port)
    rss_end = rss_kib(proc.pid)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(120)
    log.close()

    fails = []
    rss0 = samples[0][1] if samples else rss_end
    rss1 = samples[-1][1] if samples else rss_end
    growth = 100.0 * (rss1 - rss0) / rss0 if rss0 else 0.0
    leaked = int(m1.get("trellis_kv_pages_total", 0) - m1.get("trellis_kv_pages_free", 0)
                 - m1.get("trellis_kv_pages_cached", 0)) + int(m1.get("trellis_kv_pages_used", 0))
    n_req = sum(v for k, v in st.counts.items() if k != "ERROR")
    print(f"soak: {a.minutes:g} min, {a.concurrency} clients, warm-up {warm:.0f} s, "
          f"{n_req} requests ({len(samples)} samples)")
    print("  mix: " + ", ".join(f"{k} {v}" for k, v in sorted(st.counts.items())))
    print(f"  rss after warm-up {rss0 / 1024:.1f} MiB, at the end {rss1 / 1024:.1f} MiB, "
          f"growth {growth:+.2f} % (idle after: {rss_end / 1024:.1f} MiB)")
    if samples:  # the RSS curve at fifths of the run after warm-up
        pts = [samples[min(len(samples) - 1, i * (len(samples) - 1) // 5)] for i in range(6)]
        print("  rss MiB / grammar cache MiB at t: " + ", ".join(
            f"{p[0]:.0f}s {p[1] / 1024:.1f}/{p[4] / 2**20:.1f}" for p in pts))
    if a.plot and samples:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from plot_png import write_plot
        write_plot(a.plot, [p[0] for p in samples], [p[1] / 1024 for p in samples])
        print(f"  rss curve: {a.plot}")
    if m1.get("trellis_kv_disk_pages_written_total"):  # --kv-cache-dir
        print(f"  disk tier: {m1['trellis_kv_disk_pages_written_total']:.0f} pages written, "
              f"{m1.get('trellis_kv_disk_pages_read_total', 0):.0f} read back "
              f"({m1.get('trellis_kv_disk_hit_tokens_total', 0):.0f} prompt tokens), "
              f"{m1.get('trellis_kv_disk_evicted_total', 0):.0f} deleted by the bound, "
              f"{m1.get('trellis_kv_disk_pages', 0):.0f} kept "
              f"({m1.get('trellis_kv_disk_bytes', 0) / 2**20:.1f} MiB); "
              f"{m1.get('trellis_kv_disk_corrupt_total', 0):.0f} corrupt, "
              f"{m1.get('trellis_kv_disk_write_errors_total', 0):.0f} write errors")
        if m1.get("trellis_kv_disk_corrupt_total") or m1.get("trellis_kv_disk_write_errors_total"):
            fails.append("the disk tier found corrupt records or failed writes")
    print(f"  pages: total {m1.get('trellis_kv_pages_total', 0):.0f}, free at start "
          f"{m0.get('trellis_kv_pages_free', 0):.0f}, idle at the end: free "
          f"{m1.get('trellis_kv_pages_free', 0):.0f} + cached "
          f"{m1.get('trellis_kv_pages_cached', 0):.0f}, used "
          f"{m1.get('trellis_kv_pages_used', 0):.0f} -> leaked {leaked}")
    print(f"  unexpected errors: {st.counts.get('ERROR', 0)}; server exit {rc}")
    for e in st.errors[:20]:
        print("    " + e)
    if growth >= 5.0:
        fails.append(f"RSS grew {growth:.2f} % (>= 5 %)")
    if not idle or leaked != 0:
        fails.append(f"{leaked} pages not back (idle: {idle})")
    if st.counts.get("ERROR", 0):
        fails.append(f"{st.counts['ERROR']} unexpected errors")
    if rc != 0:
        fails.append(f"server exited {rc} (log: {log.name})")
    if n_req == 0:
        fails.append("no request completed")
    print("soak: " + ("PASS" if not fails else "FAIL: " + "; ".join(fails)))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
