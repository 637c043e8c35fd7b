"""Fixtures for the server's end-to-end tests: `trellis serve` processes
on free loopback ports, each started with --port-file and waited for
(GET /health 200), and stopped with SIGTERM (which must exit 0)."""
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

BIN = os.environ.get("TRELLIS_BIN", "build/trellis")


class Server:
    def __init__(self, *args, wait=True):
        self.dir = tempfile.mkdtemp(prefix="trellis-serve-")
        self.port_file = os.path.join(self.dir, "port")
        self.log_path = os.path.join(self.dir, "log")
        self.log = open(self.log_path, "w")
        cmd = [BIN, "serve", "--port", "0", "--port-file", self.port_file,
               "--threads", "2", "--kv-mem", "128", *args]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while not os.path.exists(self.port_file) or not open(self.port_file).read().strip():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("server did not start: " + self.read_log())
            time.sleep(0.02)
        self.port = int(open(self.port_file).read())
        self.base = f"http://127.0.0.1:{self.port}"
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, _ = self.get("/health")
            if status == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("server not ready: " + self.read_log())

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        return open(self.log_path).read()

    def request(self, method, path, body=None, headers=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        data = body
        if isinstance(body, (dict, list)):
            data = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw.decode("utf-8", "replace")

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def engine(self):
        status, info = self.get("/server_info")
        assert status == 200, info
        return info["engine"]

    def wait_idle(self, timeout=60):
        """Until no sequence runs and no KV page is held by one."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            e = self.engine()
            if e["running"] == 0 and e["waiting"] == 0 and e["pages_used"] == 0:
                return e
            time.sleep(0.05)
        raise AssertionError(f"engine not idle: {self.engine()}")

    def stop(self, expect=0, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("the server did not stop on SIGTERM: " + self.read_log())
        self.log.close()
        assert self.proc.returncode == expect, self.read_log()


@pytest.fixture(scope="session")
def server():
    s = Server("--read-timeout", "3", "--idle-timeout", "5", "--max-body", "65536",
               "--max-header", "4096", "--max-url", "1024", "--ctx", "2048")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)


def raw_connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    return s


def read_all(sock, timeout=30):
    sock.settimeout(timeout)
    out = b""
    while True:
        try:
            b = sock.recv(65536)
        except socket.timeout:
            break
        if not b:
            break
        out += b
    return out
