#!/usr/bin/env python3
"""Failure drills for the scale-out setup (not in CI; docs/reliability.md
has the run of record).

    build/e2e-venv/bin/python tests/soak/drills.py build [--clients 6]

needs sglang-router 0.3.2 in that Python (tests/e2e/server/run.sh installs
it with TRELLIS_ROUTER=1). Three `trellis serve` workers on fixed loopback
ports behind `sglang_router.launch_router` (round robin, health checks
every second, one failure marks a worker down; the router's retry
defaults), CLIENTS threads sending chat completions through the router in
a loop (every other one streamed), and these drills one after the other:

  kill     kill -9 worker 0 while requests stream, then restart it on
           the same port
  drain    SIGTERM to worker 1 (it finishes what it has and exits 0),
           then restart it
  stall    SIGSTOP worker 2 for 10 s, then SIGCONT
  queue    fill worker 0's queue (--max-running 4, --max-queue 4) with
           long requests sent to it directly, while the load goes on

Per drill: the requests that ended in its window and which failed (HTTP
status or exception), how long after the event the last failing request
ended (when the router had stopped sending to the worker), when the worker
got a request again after coming back, and the slowest request. At the
end, idle: each worker's pages (none used, free + cached = total) and
RSS. Exit status 1 if a worker leaked pages, a drained worker exited
non-zero, or a restarted worker was never used again.
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_json(port, method, path, body=None, timeout=10.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body) if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        try:
            return r.status, (json.loads(raw) if raw else None)
        except ValueError:
            return r.status, raw.decode("utf-8", "replace")
    finally:
        c.close()


class Worker:
    def __init__(self, binary, idx, workdir):
        self.binary, self.idx, self.port = binary, idx, free_port()
        self.log = open(os.path.join(workdir, f"worker{idx}.log"), "ab")
        self.proc = None
        self.start()

    def start(self):
        args = [self.binary, "serve", "--port", str(self.port), "--ctx", "2048",
                "--kv-mem", "128", "--threads", "1"]
        if self.idx == 0:
            args += ["--max-running", "4", "--max-queue", "4"]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if http_json(self.port, "GET", "/health", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"worker {self.idx} did not start")

    def submitted(self):
        """Requests its engine took, or None when it does not answer."""
        try:
            st, info = http_json(self.port, "GET", "/get_server_info", timeout=0.3)
            return info["engine"]["requests_submitted"] if st == 200 else None
        except (OSError, ValueError, KeyError):
            return None

    def rss_mib(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None


class Load:
    """CLIENTS threads looping requests through the router; every result
    recorded as (t_start, t_end, outcome) with outcome "ok" or the
    failure."""

    def __init__(self, port, clients):
        self.port, self.stop, self.results = port, threading.Event(), []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(clients)]
        for t in self.threads:
            t.start()

    def one(self, i, n):
        stream = (i + n) % 2 == 1
        body = {"model": "default", "max_tokens": 24, "temperature": 0.7, "stream": stream,
                "messages": [{"role": "user", "content": f"Tell me about topic {n % 17}."}]}
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            c.request("POST", "/v1/chat/completions", body=json.dumps(body),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            raw = r.read()
            if r.status != 200:
                return f"HTTP {r.status}"
            if stream:
                if b"data: [DONE]" not in raw:
                    return "stream cut"
                if b'"error"' in raw:
                    return "error in stream"
            return "ok"
        except (OSError, http.client.HTTPException) as e:
            return type(e).__name__
        finally:
            c.close()

    def run(self, i):
        n = 0
        while not self.stop.is_set():
            t0 = time.time()
            out = self.one(i, n)
            with self.lock:
                self.results.append((t0, time.time(), out))
            n += 1
            if out != "ok":
                time.sleep(0.05)

    def window(self, a, b):
        with self.lock:
            return [r for r in self.results if a <= r[1] < b]

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(90)


def used_again_after(worker, t_back, limit=30.0):
    """Seconds from t_back until the worker's engine took a request from
    the router (its counter moved), or None within limit."""
    base = worker.submitted() or 0
    while time.time() - t_back < limit:
        n = worker.submitted()
        if n is not None and n > base:
            return time.time() - t_back
        time.sleep(0.2)
    return None


def summarize(name, load, t_event, t_end, back_after=None, extra=""):
    rs = load.window(t_event, t_end)
    fails = [r for r in rs if r[2] != "ok"]
    kinds = {}
    for r in fails:
        kinds[r[2]] = kinds.get(r[2], 0) + 1
    last_fail = max((r[1] for r in fails), default=None)
    slowest = max((r[1] - r[0] for r in rs), default=0)
    return {"drill": name, "requests": len(rs), "failed": len(fails),
            "failures": ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items())) or "-",
            "last_failure_s": None if last_fail is None else round(last_fail - t_event, 1),
            "back_s": None if back_after is None else round(back_after, 1),
            "slowest_s": round(slowest, 1), "notes": extra}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--json", help="write the rows here too")
    a = ap.parse_args()
    binary = os.path.join(a.build, "trellis")
    work = tempfile.mkdtemp(prefix="trellis-drills-")
    workers = [Worker(binary, i, work) for i in range(3)]
    rport, prom = free_port(), free_port()
    rlog = open(os.path.join(work, "router.log"), "w")
    router = subprocess.Popen(
        [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
         "--port", str(rport), "--prometheus-port", str(prom), "--policy", "round_robin",
         "--worker-urls", *[f"http://127.0.0.1:{w.port}" for w in workers],
         "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
         "--log-level", "warn"], stdout=rlog, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while True:
        try:
            if http_json(rport, "GET", "/v1/models", timeout=1)[0] == 200:
                break
        except OSError:
            pass
        if router.poll() is not None or time.time() > deadline:
            sys.exit("router did not start; log in " + rlog.name)
        time.sleep(0.2)
    rows, problems = [], []
    load = Load(rport, a.clients)
    try:
        time.sleep(10)
        rss0 = [w.rss_mib() for w in workers]
        rows.append(summarize("baseline (10 s)", load, time.time() - 10, time.time()))

        # kill -9 mid-stream, restart on the same port
        w = workers[0]
        t = time.time()
        w.proc.send_signal(signal.SIGKILL)
        w.proc.wait()
        time.sleep(10)
        w.start()
        t_back = time.time()
        back = used_again_after(w, t_back)
        time.sleep(5)
        if back is None:
            problems.append("worker 0 not used again after its restart")
        rows.append(summarize("kill -9 worker 0, restart after 10 s", load, t, time.time(), back))

        # SIGTERM: drain, exit 0, restart
        w = workers[1]
        t = time.time()
        w.proc.send_signal(signal.SIGTERM)
        rc = w.proc.wait(90)
        if rc != 0:
            problems.append(f"worker 1 exited {rc} on SIGTERM")
        time.sleep(max(0.0, 10 - (time.time() - t)))
        w.start()
        t_back = time.time()
        back = used_again_after(w, t_back)
        time.sleep(5)
        if back is None:
            problems.append("worker 1 not used again after its restart")
        rows.append(summarize("SIGTERM worker 1 (drain), restart", load, t, time.time(), back,
                              f"exit status {rc}"))

        # SIGSTOP for 10 s
        w = workers[2]
        t = time.time()
        w.proc.send_signal(signal.SIGSTOP)
        time.sleep(10)
        w.proc.send_signal(signal.SIGCONT)
        t_back = time.time()
        back = used_again_after(w, t_back)
        time.sleep(5)
        rows.append(summarize("SIGSTOP worker 2 for 10 s", load, t, time.time(), back))

        # queue full on worker 0: long requests straight to it
        w = workers[0]
        t = time.time()
        hogs, statuses = [], []

        def hog():
            try:
                st, _ = http_json(w.port, "POST", "/v1/completions",
                                  {"prompt": "Once", "max_tokens": 400, "ignore_eos": True},
                                  timeout=120)
            except OSError as e:
                st = type(e).__name__
            statuses.append(st)

        for _ in range(12):
            th = threading.Thread(target=hog, daemon=True)
            th.start()
            hogs.append(th)
        time.sleep(15)
        for th in hogs:
            th.join(120)
        hog_kinds = {}
        for st in statuses:
            hog_kinds[st] = hog_kinds.get(st, 0) + 1
        rows.append(summarize("queue of worker 0 full (12 direct long requests)", load, t,
                              time.time(), None,
                              "direct: " + ", ".join(f"{k} x{v}" for k, v in
                                                     sorted(hog_kinds.items(), key=str))))
    finally:
        load.finish()
    # idle: pages and RSS
    time.sleep(2)
    for i, w in enumerate(workers):
        st, info = http_json(w.port, "GET", "/get_server_info")
        e = info["engine"]
        ok = e["pages_used"] == 0 and e["pages_free"] + e["pages_cached"] == e["pages_total"]
        if not ok:
            problems.append(f"worker {i} pages: {e}")
        rows.append({"drill": f"worker {i} idle at the end", "requests": e["requests_submitted"],
                     "failed": "", "failures": "-", "last_failure_s": None, "back_s": None,
                     "slowest_s": None,
                     "notes": f"pages used {e['pages_used']}, free {e['pages_free']} + cached "
                              f"{e['pages_cached']} of {e['pages_total']}; RSS "
                              f"{w.rss_mib():.1f} MiB (after warm-up: "
                              f"{rss0[i]:.1f} MiB, restarted since: {i < 2})"})
    router.send_signal(signal.SIGTERM)
    for w in workers:
        w.proc.send_signal(signal.SIGTERM)
        w.proc.wait(60)
    try:
        router.wait(20)
    except subprocess.TimeoutExpired:
        router.kill()
    print("| drill | requests ended in it | failed | failures | last failure after (s) "
          "| worker used again after (s) | slowest request (s) | notes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| {drill} | {requests} | {failed} | {failures} | {last_failure_s} | {back_s} "
              "| {slowest_s} | {notes} |".format(**{k: ("-" if v is None else v)
                                                     for k, v in r.items()}))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    for p in problems:
        print("PROBLEM:", p)
    print("logs in", work)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
