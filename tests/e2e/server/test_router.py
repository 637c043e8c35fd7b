"""Trellis behind SGLang's own cache-aware router (PyPI sglang-router
0.3.2): two `trellis serve` workers, the router in front, the openai
client through the router. Opt-in: skipped when the router is not
installed (run.sh installs it with TRELLIS_ROUTER=1)."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import Server

router_mod = pytest.importorskip("sglang_router")

MODEL = "SmolLM2-135M-Instruct.Q4_1"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


@pytest.fixture(scope="module")
def cluster():
    workers = [Server("--ctx", "2048"), Server("--ctx", "2048")]
    port, prom = free_port(), free_port()
    log = open(os.path.join(workers[0].dir, "router.log"), "w")
    router = subprocess.Popen(
        [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
         "--port", str(port), "--prometheus-port", str(prom), "--policy", "cache_aware",
         "--worker-urls", *[w.base for w in workers],
         "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
         "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
    import openai
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    deadline = time.time() + 60
    while True:
        try:
            client.models.list()
            break
        except Exception:
            if router.poll() is not None or time.time() > deadline:
                raise RuntimeError("router did not start: " + open(log.name).read()[-3000:])
            time.sleep(0.2)
    yield client, workers, router
    router.send_signal(signal.SIGTERM)
    try:
        router.wait(20)
    except subprocess.TimeoutExpired:
        router.kill()
    for w in workers:
        if w.proc.poll() is None:
            w.stop()


def test_chat_through_router(cluster):
    client, workers, _ = cluster
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=16, temperature=0)
    assert "Paris" in r.choices[0].message.content
    # greedy: the same answer as a worker asked directly
    s, direct = workers[1].post("/v1/chat/completions", {"messages": msgs, "max_tokens": 16,
                                                         "temperature": 0})
    assert s == 200 and direct["choices"][0]["message"]["content"] == r.choices[0].message.content
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=6,
        stream=True)
    assert any(c.choices and c.choices[0].finish_reason for c in stream)


def test_cache_aware_routing(cluster):
    client, workers, _ = cluster
    prefix = "You are a librarian. " + " ".join(
        f"Book {i} is on shelf {i % 7} in row {i % 5}." for i in range(80))
    usage = []
    for q in ("Where is book 3?", "Where is book 9?", "Where is book 12?"):
        r = client.chat.completions.create(
            model=MODEL, messages=[{"role": "system", "content": prefix},
                                   {"role": "user", "content": q}],
            max_tokens=2, temperature=0)
        usage.append(r.usage)
    assert usage[0].prompt_tokens > 500
    # the repeats went where the prefix is cached
    assert usage[1].prompt_tokens_details.cached_tokens > 500
    assert usage[2].prompt_tokens_details.cached_tokens > 500


def test_killed_worker_taken_out(cluster):
    client, workers, _ = cluster
    workers[0].proc.kill()
    workers[0].proc.wait()
    ok = 0
    for i in range(12):
        for attempt in range(3):  # the router may need a health check to notice
            try:
                r = client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": f"Count to {i}."}],
                    max_tokens=4, temperature=0)
                assert r.choices[0].message.content
                ok += 1
                break
            except Exception:
                time.sleep(1.5)
    assert ok == 12
    # once noticed, nothing fails any more
    for i in range(6):
        r = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"Hi {i}"}], max_tokens=2)
        assert r.choices
