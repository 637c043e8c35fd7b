"""HTTP/1.1 at the socket level: keep-alive, pipelining, limits (URL,
headers, body), slow clients, garbage bytes, half-closed and vanished
clients. The session server runs with --read-timeout 3 --idle-timeout 5
--max-body 65536 --max-header 4096 --max-url 1024."""
import json
import socket
import time

from conftest import raw_connect, read_all


def responses(data):
    """Splits a byte stream into (status, headers, body) responses
    (Content-Length or chunked framing)."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, data[:200]
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        hdr = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        if hdr.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                n = int(size_line, 16)
                body += rest[:n]
                rest = rest[n + 2:]
                if n == 0:
                    break
        else:
            n = int(hdr.get("content-length", "0"))
            body, rest = rest[:n], rest[n:]
        out.append((status, hdr, body))
        data = rest
    return out


def req(method, path, body=b"", extra=b""):
    return (f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n".encode()
            + extra + b"\r\n" + body)


def test_keepalive_and_pipelining(server):
    s = raw_connect(server.port)
    gen = json.dumps({"text": "Hi", "sampling_params": {"max_new_tokens": 2}}).encode()
    # three requests in one write, a generation in the middle: answered in order
    s.sendall(req("GET", "/health") + req("POST", "/generate", gen) + req("GET", "/v1/models")
              + req("GET", "/health", extra=b"Connection: close\r\n"))
    rs = responses(read_all(s))
    s.close()
    assert [r[0] for r in rs] == [200, 200, 200, 200]
    assert "output_ids" in json.loads(rs[1][2])
    assert json.loads(rs[2][2])["object"] == "list"
    assert rs[3][1].get("connection") == "close"


def test_keepalive_reuse(server):
    s = raw_connect(server.port)
    for _ in range(3):
        s.sendall(req("GET", "/health"))
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(4096)
        assert data.startswith(b"HTTP/1.1 200")
    s.close()


def test_limits(server):
    s = raw_connect(server.port)
    s.sendall(b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    r = responses(read_all(s))
    assert r[0][0] == 414 and r[0][1]["connection"] == "close"
    s = raw_connect(server.port)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + b"b" * 5000 + b"\r\n\r\n")
    assert responses(read_all(s))[0][0] == 431
    # Content-Length over the limit: refused before the body is sent
    s = raw_connect(server.port)
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n")
    r = responses(read_all(s))
    assert r[0][0] == 413 and b"65536" in r[0][2]
    # chunked body growing past the limit
    s = raw_connect(server.port)
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    try:
        for _ in range(20):
            s.sendall(b"2000\r\n" + b"x" * 0x2000 + b"\r\n")
    except OSError:
        pass
    assert responses(read_all(s))[0][0] == 413


def test_expect_continue(server):
    s = raw_connect(server.port)
    body = json.dumps({"prompt": "Hello"}).encode()
    s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n")
    first = s.recv(4096)
    assert first.startswith(b"HTTP/1.1 100 Continue")
    s.sendall(body + b"")
    s.sendall(req("GET", "/health", extra=b"Connection: close\r\n"))
    rs = responses(read_all(s))
    assert rs[0][0] == 200 and json.loads(rs[0][2])["count"] > 0


def test_garbage(server):
    s = raw_connect(server.port)
    s.sendall(b"GET /health HTTP/2.0\r\n\r\n")
    assert responses(read_all(s))[0][0] == 505
    for junk in (b"\x00\x01\x02garbage\r\n\r\n", b"GET / HTTP/1.x\r\n\r\n",
                 b"HELLO WORLD\r\n\r\n", b"GET /health HTTP/1.1\r\nBad Header\r\n\r\n"):
        s = raw_connect(server.port)
        s.sendall(junk)
        r = responses(read_all(s))
        assert r[0][0] == 400, junk
        assert "malformed" in json.loads(r[0][2])["error"]["message"]
    s = raw_connect(server.port)  # a body that is not JSON, then a good request: still served
    s.sendall(req("POST", "/v1/completions", b"\xff\xfe not json")
              + req("GET", "/health", extra=b"Connection: close\r\n"))
    rs = responses(read_all(s))
    assert [r[0] for r in rs] == [400, 200]


def test_invalid_utf8_prompt(server):
    s = raw_connect(server.port)
    s.sendall(req("POST", "/v1/completions", b'{"prompt": "\xff\xfe", "max_tokens": 2}',
                  extra=b"Connection: close\r\n"))
    r = responses(read_all(s))
    assert r[0][0] == 400


def test_slow_client_timed_out(server):
    s = raw_connect(server.port)
    t0 = time.time()
    sent = b"GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: "
    try:
        for ch in sent + b"a" * 30:
            s.sendall(bytes([ch]))
            time.sleep(0.25)
            if time.time() - t0 > 6:
                break
    except OSError:
        pass
    r = responses(read_all(s, timeout=10))
    assert r[0][0] == 408
    assert time.time() - t0 < 8


def test_idle_connection_closed(server):
    s = raw_connect(server.port)
    t0 = time.time()
    assert read_all(s, timeout=15) == b""  # closed by the server, no response
    assert 4 < time.time() - t0 < 10


def test_half_close(server):
    s = raw_connect(server.port)
    s.sendall(req("GET", "/health"))
    s.shutdown(socket.SHUT_WR)
    r = responses(read_all(s))
    assert r[0][0] == 200
    # a generation whose client half-closes is treated as gone: cancelled
    s = raw_connect(server.port)
    body = json.dumps({"prompt": "Tell a story", "max_tokens": 1500, "ignore_eos": True}).encode()
    s.sendall(req("POST", "/v1/completions", body))
    time.sleep(0.3)
    s.shutdown(socket.SHUT_WR)
    read_all(s)
    e = server.wait_idle(timeout=30)
    assert e["pages_used"] == 0


def test_many_connections_reset(server):
    # clients that connect, send part of a request and vanish
    for i in range(50):
        s = raw_connect(server.port)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro"[: 10 + i])
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    assert server.get("/health")[0] == 200
