#!/usr/bin/env python3
"""The disk tier's restart benchmark (issue: TTFT of a long shared prefix
after a restart >= 8x lower than computing it; outputs identical).

  tests/bench/disk_restart.py BUILD/trellis [--rounds 5] [--prefix-words 1480]

Each round, alternating the two arms:
  disk:     a server with --kv-cache-dir serves prompt A (prefix + suffix A),
            is stopped with SIGTERM (its cache goes to disk) and started
            again; prompt B (same prefix, suffix B) is timed;
  compute:  a fresh server without the tier is started; prompt B is timed.
Time to first token is the latency of a 1-token greedy completion
(queueing included, as a client sees it); the greedy 16-token outputs of
B are compared. Prints medians, the ratio, and the prefix length in
tokens."""
import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

WORDS = ("the of and to in a is that for it as was with be by on not he this are or "
         "his from at which but have an they you were her she there been one all").split()


def words(seed, n):
    x, out = seed, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(WORDS[(x >> 33) % len(WORDS)])
    return " ".join(out)


class Server:
    def __init__(self, binary, *args):
        self.dir = tempfile.mkdtemp(prefix="trellis-bench-")
        pf = os.path.join(self.dir, "port")
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.p = subprocess.Popen([binary, "serve", "--port", "0", "--port-file", pf,
                                   "--threads", "2", "--ctx", "2048", *args],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while True:
            if os.path.exists(pf) and open(pf).read().strip():
                self.port = int(open(pf).read())
                if self.get("/health")[0] == 200:
                    break
            if time.time() - t0 > 120 or self.p.poll() is not None:
                raise SystemExit("server did not start: " + open(self.log.name).read())
            time.sleep(0.05)

    def req(self, method, path, body=None):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
            c.request(method, path, json.dumps(body) if body is not None else None,
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, json.loads(r.read() or b"null")
        except (OSError, ValueError):
            return 0, None

    def get(self, path):
        return self.req("GET", path)

    def complete(self, prompt, n):
        t0 = time.perf_counter()
        st, r = self.req("POST", "/v1/completions",
                         {"prompt": prompt, "max_tokens": n, "temperature": 0})
        dt = time.perf_counter() - t0
        assert st == 200, r
        return dt, r

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        assert self.p.wait(300) == 0, open(self.log.name).read()[-2000:]
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prefix-words", type=int, default=1480)
    a = ap.parse_args()
    ttft = {"disk": [], "compute": []}
    tokens = None
    same = True
    for r in range(a.rounds):
        prefix = words(1000 + r, a.prefix_words)
        pa = prefix + " " + words(5000 + r, 12)
        pb = prefix + " " + words(9000 + r, 12)
        for arm in (("disk", "compute") if r % 2 == 0 else ("compute", "disk")):
            if arm == "disk":
                d = tempfile.mkdtemp(prefix="trellis-kvd-")
                s = Server(a.bin, "--kv-cache-dir", d)
                s.complete(pa, 1)
                s.stop()
                s = Server(a.bin, "--kv-cache-dir", d)
            else:
                d = None
                s = Server(a.bin)
            dt, r1 = s.complete(pb, 1)
            ttft[arm].append(dt)
            tokens = r1["usage"]["prompt_tokens"]
            if arm == "disk":
                hit = s.get("/server_info")[1]["engine"]["disk_hit_tokens"]
                print(f"round {r} disk: {dt * 1000:.1f} ms, {hit} tokens read back", flush=True)
            else:
                print(f"round {r} compute: {dt * 1000:.1f} ms", flush=True)
            _, r16 = s.complete(pb, 16)
            text = r16["choices"][0]["text"]
            if arm == "disk":
                disk_text = text
            else:
                compute_text = text
            s.stop()
            if d:
                shutil.rmtree(d, ignore_errors=True)
        same = same and disk_text == compute_text
    md, mc = statistics.median(ttft["disk"]), statistics.median(ttft["compute"])
    print(f"prompt {tokens} tokens; TTFT median after a restart: disk tier {md * 1000:.1f} ms, "
          f"computed {mc * 1000:.1f} ms: {mc / md:.1f}x lower; greedy outputs "
          f"{'identical' if same else 'DIFFERENT'} in every round")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
