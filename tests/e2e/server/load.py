#!/usr/bin/env python3
"""load.py — the server's load test: many concurrent streams against one
`trellis serve`, a tenth of them disconnecting early, a quarter
constrained (regex or choices), chat, completions and /generate mixed.
Passes when: no unexpected error (every request that was not cut by its
client gets 200 and a finish_reason), afterwards no sequence runs and no
KV page is held (/server_info), the flushed cache gives every page back,
and the server's RSS after the run is within --rss-growth of its RSS
after the warm-up quarter.

  load.py BIN [--requests 2000] [--concurrency 64] [--max-tokens 16]
  (the issue's run; under AddressSanitizer: BIN = build-asan/trellis,
   ASAN_OPTIONS=detect_leaks=1: a leak fails the server's exit, which
   fails this script)
ctest runs a short variant (e2e_server_load: 200 requests, 16 streams).
"""
import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from serve_http import Conn, Result  # noqa: E402


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return json.loads(r.read() or b"null")


def make(i, rng, max_tokens):
    kind = rng.choice(["chat", "chat", "completion", "generate"])
    constrained = rng.random() < 0.25
    words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "river", "stone", "light"])
                     for _ in range(rng.randint(3, 60)))
    con = {}
    if constrained:
        con = ({"regex": "[a-z]+( [a-z]+){0,4}\\."} if rng.random() < 0.5
               else {"choices": ["yes", "no", "maybe later"]})
    if kind == "chat":
        body = {"messages": [{"role": "system", "content": "You are terse."},
                             {"role": "user", "content": f"Request {i}: {words}"}],
                "max_tokens": max_tokens, "stream": True, "temperature": 0.7, "seed": i, **con}
        path = "/v1/chat/completions"
    elif kind == "completion":
        body = {"prompt": f"Note {i}: {words}", "max_tokens": max_tokens, "stream": True,
                "temperature": 0.7, "seed": i, **con}
        path = "/v1/completions"
    else:
        body = {"text": f"Item {i}: {words}", "stream": rng.random() < 0.5,
                "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.7, **con}}
        path = "/generate"
    return path, body


async def one_generate(conn, body, res):
    """/generate, streamed or not: 200 with a finish_reason."""
    await conn.open()
    data = json.dumps(body).encode()
    conn.writer.write((f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n\r\n")
                      .encode() + data)
    await conn.writer.drain()
    from serve_http import body_chunks, read_response_head
    status, hdr = await read_response_head(conn.reader)
    raw = b""
    async for ch in body_chunks(conn.reader, hdr):
        raw += ch
    if status != 200:
        res.error = f"HTTP {status}: {raw[:200]!r}"
        return
    if body.get("stream"):
        events = [e[6:] for e in raw.split(b"\n\n") if e.startswith(b"data: ")]
        if not events or events[-1] != b"[DONE]":
            res.error = "no [DONE]"
            return
        last = json.loads(events[-2])
    else:
        last = json.loads(raw)
    if not last["meta_info"]["finish_reason"]:
        res.error = "no finish_reason"
        return
    res.ok = True


async def run(base, n, concurrency, max_tokens, seed, on_quarter):
    host, port = base.split("//")[1].split(":")
    rng = random.Random(seed)
    jobs = [make(i, rng, max_tokens) + (rng.random() < 0.10,) for i in range(n)]
    stats = {"ok": 0, "aborted": 0, "errors": []}
    done = [0]

    async def client():
        conn = Conn(host, int(port), "")
        while jobs:
            path, body, abort = jobs.pop(0)
            r = Result()
            try:
                if abort and path != "/generate":
                    await asyncio.wait_for(conn.stream(path, body, r, abort_after=2), 300)
                    conn.close()
                    if r.error == "aborted":
                        stats["aborted"] += 1
                elif path == "/generate":
                    await asyncio.wait_for(one_generate(conn, body, r), 300)
                else:
                    await asyncio.wait_for(conn.stream(path, body, r), 300)
            except Exception as e:  # noqa: BLE001
                r.error = f"{type(e).__name__}: {e}"
                conn.close()
            if r.ok:
                stats["ok"] += 1
            elif r.error != "aborted":
                # a very short completion may finish before the client cuts it
                stats["errors"].append(f"{path}: {r.error}")
            done[0] += 1
            if done[0] == n // 4:
                on_quarter()
        conn.close()

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rss-growth", type=float, default=0.10)
    ap.add_argument("--kv-mem", type=int, default=48,
                    help="MiB: small enough that the run fills the pool (and the radix "
                         "cache) before the warm-up RSS is taken")
    ap.add_argument("--kv-cache-dir", action="store_true",
                    help="serve with the disk tier on (in a temporary folder): the pool's "
                         "evictions are written to it while the load runs")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="trellis-load-")
    extra = ["--kv-cache-dir", os.path.join(d, "kv")] if a.kv_cache_dir else []
    port_file = os.path.join(d, "port")
    log = open(os.path.join(d, "log"), "w")
    proc = subprocess.Popen([a.bin, "serve", "--port", "0", "--port-file", port_file,
                             "--threads", "2", "--kv-mem", str(a.kv_mem), "--ctx", "1024",
                             "--max-queue", str(4 * a.concurrency), *extra],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        base = None
        while time.time() < deadline:
            if os.path.exists(port_file) and open(port_file).read().strip():
                base = f"http://127.0.0.1:{int(open(port_file).read())}"
                try:
                    urllib.request.urlopen(base + "/health", timeout=5)
                    break
                except Exception:
                    pass
            time.sleep(0.1)
        else:
            raise SystemExit("server did not start")
        rss = {}
        t0 = time.time()
        stats = asyncio.run(run(base, a.requests, a.concurrency, a.max_tokens, a.seed,
                                lambda: rss.setdefault("warm", rss_kb(proc.pid))))
        wall = time.time() - t0
        # every page free: nothing runs, no page held by a sequence
        deadline = time.time() + 60
        while True:
            info = get(base, "/server_info")
            e = info["engine"]
            if (e["running"], e["waiting"], e["pages_used"], info["in_flight"]) == (0, 0, 0, 0):
                break
            if time.time() > deadline:
                raise SystemExit(f"FAIL: not idle after the run: {info}")
            time.sleep(0.1)
        disk_idle = a.kv_cache_dir and info["engine"]["disk_pages"] == 0
        if a.kv_cache_dir:
            print(f"disk tier: {info['engine']['disk_pages_written']} pages written, "
                  f"{info['engine']['disk_pages']} kept, "
                  f"{info['engine']['disk_hit_tokens']} prompt tokens read back")
        req = urllib.request.Request(base + "/flush_cache", data=b"{}", method="POST")
        urllib.request.urlopen(req, timeout=60).read()
        e = get(base, "/server_info")["engine"]
        rss["end"] = rss_kb(proc.pid)
        print(f"{a.requests} requests, {a.concurrency} streams in {wall:.1f} s: {stats['ok']} ok, "
              f"{stats['aborted']} cut by their client, {len(stats['errors'])} unexpected errors; "
              f"pages used {e['pages_used']}, free {e['pages_free']}/{e['pages_total']}; "
              f"RSS {rss.get('warm', 0) // 1024} MiB after warm-up, {rss['end'] // 1024} MiB at "
              "the end")
        failed = False
        for err in stats["errors"][:10]:
            print("  unexpected:", err)
        if stats["errors"]:
            failed = True
        if disk_idle:
            print("FAIL: the disk tier kept no page: the run did not exercise it")
            failed = True
        if e["pages_free"] != e["pages_total"]:
            print("FAIL: pages not all free after flush_cache")
            failed = True
        if rss.get("warm") and rss["end"] > rss["warm"] * (1 + a.rss_growth) + 16 * 1024:
            print(f"FAIL: RSS grew more than {100 * a.rss_growth:.0f}% after warm-up")
            failed = True
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = -9
        log.close()
    if code != 0:
        print(f"FAIL: the server exited with {code}:\n" + open(log.name).read()[-4000:])
        failed = True
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
