"""Faults and security of `trellis serve` (docs/reliability.md): the
loopback default, prompts and keys kept out of the log, no request field
that reaches a file, KV pool exhaustion, the model file removed while
serving, and every route asked while the model is still loading."""
import json
import os
import shutil
import tempfile
import threading
import time

from conftest import Server

MARK = "zebra-quartz-7731"
MODEL_PATH = os.environ.get("TRELLIS_MODEL") or os.path.join(
    os.environ.get("TRELLIS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trellis"),
    "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def listen_addrs(port):
    """Local addresses of the sockets listening on port (/proc/net/tcp*)."""
    out = []
    for path, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            addr, p = f[1].split(":")
            if int(p, 16) == port and f[3] == "0A":  # LISTEN
                out.append((width, addr))
    return out


def test_loopback_by_default():
    s = Server()
    try:
        addrs = listen_addrs(s.port)
        assert addrs, "no listening socket found"
        for width, addr in addrs:
            # 127.0.0.1 is 0100007F in /proc's byte order; ::1 ends in 01000000
            assert (width, addr) in ((8, "0100007F"), (32, "00000000000000000000000001000000")), addrs
    finally:
        s.stop()


def chat_with_mark(s, headers=None):
    st, r = s.post("/v1/chat/completions",
                   {"messages": [{"role": "user", "content": f"Repeat {MARK}."}], "max_tokens": 4},
                   headers=headers)
    assert st == 200, r


def test_prompts_logged_only_with_flag():
    s = Server("--log-requests", "--api-key", "k3y-" + MARK[::-1])
    try:
        chat_with_mark(s, {"Authorization": "Bearer k3y-" + MARK[::-1]})
        # a bad request too: its error message must not quote the prompt
        st, _ = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": MARK}],
                                                "max_tokens": -1},
                       headers={"Authorization": "Bearer k3y-" + MARK[::-1]})
        assert st == 400
    finally:
        s.stop()
    log = s.read_log()
    assert "POST /v1/chat/completions" in log  # --log-requests works
    assert MARK not in log
    assert MARK[::-1] not in log  # the key

    s = Server("--log-requests", "--log-prompts", "--api-key", "k3y-" + MARK[::-1])
    try:
        chat_with_mark(s, {"Authorization": "Bearer k3y-" + MARK[::-1]})
    finally:
        s.stop()
    log = s.read_log()
    assert MARK in log  # the flag does log prompts (so the check above can fail)
    assert MARK[::-1] not in log  # never the key


def test_no_request_field_names_a_file(server):
    secret_dir = tempfile.mkdtemp(prefix="trellis-secret-")
    secret = os.path.join(secret_dir, "schema.json")
    with open(secret, "w") as f:
        json.dump({"type": "string", "const": MARK}, f)
    msgs = [{"role": "user", "content": "hi"}]
    for body in (
        {"model": secret, "messages": msgs},
        {"model": "/etc/passwd", "messages": msgs},
        {"messages": msgs, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"$ref": "file://" + secret}}}},
        {"messages": msgs, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"$ref": secret}}}},
        {"messages": msgs, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"$ref": "schema.json#"}}}},
        {"messages": msgs, "ebnf": f'root ::= "@include {secret}"', "max_tokens": 40},
    ):
        st, r = server.post("/v1/chat/completions", body)
        text = json.dumps(r)
        assert MARK not in text, (body, r)
        if "ebnf" in body:  # a literal, generated as such: never a file's content
            assert st == 200 and r["choices"][0]["message"]["content"] == "@include " + secret
        else:
            assert st in (400, 404), (body, st, r)
    for path in ("/model_info", "/server_info", "/v1/models"):
        st, r = server.get(path)
        assert st == 200 and ".gguf" not in json.dumps(r), (path, r)
    shutil.rmtree(secret_dir)


def test_kv_pool_exhaustion():
    # 2 MiB of KV: a few pages; 6 concurrent long requests cannot all fit:
    # the engine preempts and resumes, every request completes, and a
    # request larger than the whole pool is refused with a clean error.
    s = Server("--kv-mem", "2", "--max-running", "6", "--ctx", "2048")
    try:
        info = s.engine()
        results = []

        def run(i):
            results.append(s.post("/v1/completions", {"prompt": f"Story {i}:", "max_tokens": 48,
                                                      "ignore_eos": True}))
        ts = [threading.Thread(target=run, args=(i,)) for i in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert [st for st, _ in results] == [200] * 6, results
        assert all(r["usage"]["completion_tokens"] == 48 for _, r in results)
        st, r = s.get("/metrics")
        assert st == 200
        preempt = [ln for ln in r.splitlines() if ln.startswith("trellis_preemptions_total")]
        assert preempt and float(preempt[0].split()[1]) > 0, (info, preempt)
        st, r = s.post("/v1/completions", {"prompt": "word " * 400, "max_tokens": 1500,
                                           "ignore_eos": True})
        assert st == 400 and "the whole pool has" in r["error"]["message"], (st, r)
        e = s.wait_idle()
        assert e["pages_used"] == 0
        assert s.get("/health")[0] == 200
    finally:
        s.stop()


def test_model_file_removed_while_serving():
    d = tempfile.mkdtemp(prefix="trellis-model-")
    try:
        for load in ("mmap", "read"):
            copy = os.path.join(d, f"m-{load}.gguf")
            shutil.copyfile(MODEL_PATH, copy)
            s = Server("-m", copy, "--load", load, "--served-model-name", "m")
            try:
                os.remove(copy)
                for _ in range(2):
                    st, r = s.post("/v1/completions", {"model": "m", "prompt": "Hello",
                                                       "max_tokens": 4})
                    assert st == 200 and r["usage"]["completion_tokens"] >= 1, (load, st, r)
                assert s.get("/health")[0] == 200
            finally:
                s.stop()
    finally:
        shutil.rmtree(d)


def test_grammar_budgets_are_400s():
    s = Server("--max-body", "1048576")
    try:
        msgs = [{"role": "user", "content": "x"}]
        cases = [
            ({"regex": "(a|b)*a(a|b){20}"}, "max_dfa_states"),
            ({"regex": "a{1001}"}, "max_repeat"),
            ({"regex": "a" * (300 * 1024)}, "262144"),
            ({"ebnf": "root ::= " + "(" * 300 + '"a"' + ")" * 300}, None),
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "d", "schema":
              {"enum": ["%0100d" % i for i in range(3000)]}}}}, None),
        ]
        for extra, needle in cases:
            st, r = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, **extra})
            assert st == 400, (list(extra), st, r)
            assert r["error"]["code"] in ("invalid_constraint", "unsupported_constraint", None), r
            if needle:
                assert needle in r["error"]["message"], r
        assert s.get("/health")[0] == 200
    finally:
        s.stop()


def test_max_connections_503():
    import socket
    import time
    s = Server("--max-connections", "4")
    try:
        # connections their clients closed free their slot at once
        assert [s.get("/health")[0] for _ in range(20)] == [200] * 20
        held = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(4)]
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while True:
            b = extra.recv(4096)
            if not b:
                break
            got += b
        assert got.startswith(b"HTTP/1.1 503"), got[:200]
        for h in held:
            h.close()
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if s.get("/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        assert s.get("/health")[0] == 200
    finally:
        s.stop()


def metric(server, name):
    """The value of one Prometheus sample of /metrics (name with labels)."""
    status, text = server.get("/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def test_write_timeout_cancels_a_client_that_stops_reading():
    # A streaming client that never reads: once the socket buffers are full
    # and no byte has gone out for --write-timeout seconds, the connection
    # is closed and its generation cancelled long before max_tokens.
    import socket
    import time
    s = Server("--write-timeout", "2", "--kv-mem", "512")
    try:
        cancelled = 'trellis_request_finished_total{reason="cancelled"}'
        before = metric(s, cancelled)
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)  # before connect: small window
        c.connect(("127.0.0.1", s.port))
        # 8 samples with 20 logprobs each: ~12 KB of SSE per step, so the
        # socket buffers (up to 4 MiB) fill within seconds
        n, max_tokens = 8, 2500
        body = json.dumps({"prompt": "Count:", "max_tokens": max_tokens, "ignore_eos": True,
                           "stream": True, "logprobs": 20, "n": n}).encode()
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(1)
        head = c.recv(64, socket.MSG_PEEK)
        assert head.startswith(b"HTTP/1.1 200"), head
        deadline = time.time() + 240
        while metric(s, cancelled) == before:
            assert time.time() < deadline, "the stalled stream was never cancelled"
            time.sleep(0.2)
        e = s.wait_idle(timeout=30)
        assert e["pages_used"] == 0
        generated = metric(s, "trellis_generation_tokens_total")
        assert 0 < generated < n * max_tokens, generated
        # the server closed its end: what was buffered, then EOF or a reset
        c.settimeout(10)
        got = b""
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                got += b
        except ConnectionResetError:
            pass
        assert b"data: [DONE]" not in got
        c.close()
        assert s.get("/health")[0] == 200
    finally:
        s.stop()


def test_clients_leaving_mid_stream_never_kill_the_server():
    # A streaming client that closes while the server is still writing: the
    # server's next writes to that socket fail (EPIPE). Without SIGPIPE
    # ignored, the process died of the signal (exit 141), on average within
    # a few rounds of this loop (8 streams of a request write per step).
    import socket
    import time
    s = Server()
    try:
        status = open(f"/proc/{s.proc.pid}/status").read()
        ignored = int(next(l for l in status.splitlines() if l.startswith("SigIgn:")).split()[1], 16)
        assert ignored >> 12 & 1, "SIGPIPE (13) is not ignored"
        body = json.dumps({"prompt": "Count:", "max_tokens": 200, "ignore_eos": True,
                           "stream": True, "logprobs": 5, "n": 8}).encode()
        for _ in range(20):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.connect(("127.0.0.1", s.port))
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                      % len(body) + body)
            got = b""
            while b"data: {" not in got:
                chunk = c.recv(4096)
                assert chunk, got
                got += chunk
            c.close()
            time.sleep(0.05)
            assert s.proc.poll() is None, s.read_log()
            assert s.get("/health")[0] == 200
        assert s.wait_idle(timeout=60)["pages_used"] == 0
    finally:
        s.stop()


def test_every_route_answers_while_the_model_loads():
    """The server listens before the model is loaded, so every route can be
    asked while nothing is: none may crash it (/server_info divided by the
    KV units, still 0, and killed the server on a page that polled it
    early). The model is a FIFO nobody writes yet: loading waits in open
    until the test lets it fail."""
    d = tempfile.mkdtemp(prefix="trellis-fifo-")
    fifo = os.path.join(d, "m.gguf")
    os.mkfifo(fifo)
    s = Server("-m", fifo, wait=False)
    try:
        gets = ["/health", "/health_generate", "/v1/models", "/v1/models/m", "/model_info",
                "/get_model_info", "/server_info", "/get_server_info", "/get_load",
                "/metrics", "/flush_cache", "/", "/ui/app.js"]
        posts = {"/tokenize": {"prompt": "hi"}, "/detokenize": {"tokens": [1]},
                 "/flush_cache": {}, "/v1/chat/completions": {
                     "model": "m", "messages": [{"role": "user", "content": "hi"}]},
                 "/v1/completions": {"model": "m", "prompt": "hi"},
                 "/generate": {"text": "hi"}, "/abort_request": {"rid": "x"},
                 "/concate_and_append_request": {"rid": "x", "text": "hi"}}
        for path in gets:
            st, body = s.get(path, timeout=10)
            assert st < 500 or st == 503, (path, st, body)
            assert s.proc.poll() is None, (path, s.read_log())
        for path, body in posts.items():
            st, r = s.post(path, body, timeout=10)
            assert st < 500 or st == 503, (path, st, r)
            assert s.proc.poll() is None, (path, s.read_log())
        st, info = s.get("/server_info")
        assert st == 200 and info["status"] == "loading", info
        assert info["max_total_num_tokens"] == 0, info
        assert info["internal_states"][0]["max_total_num_tokens"] == 0, info
        assert s.get("/health")[0] == 503
    finally:
        # a writer lets the loader's open return; a FIFO is no model, so
        # loading then fails (ENXIO: no reader yet, or none left)
        deadline = time.time() + 10
        while s.proc.poll() is None and time.time() < deadline:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                break
            except OSError:
                time.sleep(0.05)
        try:
            s.proc.wait(30)
        except Exception:  # noqa: BLE001 (reported by the asserts below)
            s.proc.kill()
            s.proc.wait()
        s.log.close()
        shutil.rmtree(d)
    assert s.proc.returncode == 1, s.read_log()
    assert "not a regular file" in s.read_log(), s.read_log()
