#!/usr/bin/env python3
"""serve_http.py — load generator for OpenAI-compatible servers (Trellis's
`trellis serve`, llama.cpp's llama-server, SGLang, vLLM): streamed chat
completions over raw asyncio sockets (HTTP/1.1 keep-alive, no client
library in the timing path), N concurrent clients, per-token timestamps.

Workloads (the same bytes for every server: seeded):
  fewshot  a ~1,500-token few-shot system prompt shared by every request,
           short questions (the radix cache's case)
  random   random-word prompts of 100..400 tokens, nothing shared
  json     a short prompt with response_format json_schema
  tokens   /v1/completions with a prompt of --prompt-tokens random token ids
           (for the single-stream comparison with the in-process engine use
           `trellis bench stream`: this client's own CPU time, ~0.28 ms a
           token, is taken from the server's cores when both share them)

Reports, per workload and concurrency: output tok/s (all completion
tokens / wall time), TTFT p50/p99, TPOT p50 (per request: (last token -
first token) / (tokens - 1)), errors. Output tokens are counted from the
final usage chunk (stream_options.include_usage), falling back to the
number of content deltas.

  serve_http.py --url http://127.0.0.1:8080 --workload fewshot,random,json \\
                --concurrency 1,16,32 --requests 64 --max-tokens 64 [--json OUT]
"""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import urllib.parse

WORDS = ("time year people way day man thing woman life child world school state family "
         "student group country problem hand part place case week company system program "
         "question work government number night point home water room mother area money "
         "story fact month lot right study book eye job word business issue side kind head "
         "house service friend father power hour game line end member law car city").split()

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                         "city": {"type": "string"}},
          "required": ["name", "age", "city"], "additionalProperties": False}


def fewshot_system(rng_seed=1):
    rng = random.Random(rng_seed)
    parts = ["You answer questions about objects in one short sentence. Examples follow."]
    # ~1,500 tokens of examples
    for i in range(60):
        a, b, c = rng.choice(WORDS), rng.choice(WORDS), rng.choice(WORDS)
        parts.append(f"Q: What is a {a} used for in a {b}?\nA: A {a} helps the {b} with its {c}.")
    return "\n".join(parts)


def make_requests(workload, n, max_tokens, seed, model, prompt_tokens=200):
    rng = random.Random(seed)
    out = []
    system = fewshot_system() if workload == "fewshot" else None
    for i in range(n):
        if workload == "tokens":
            out.append({"model": model, "prompt": [rng.randint(1000, 40000)
                                                   for _ in range(prompt_tokens)],
                        "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                        "stream": True, "stream_options": {"include_usage": True}})
            continue
        if workload == "fewshot":
            msgs = [{"role": "system", "content": system},
                    {"role": "user", "content": f"What is a {rng.choice(WORDS)} used for in a "
                                                f"{rng.choice(WORDS)}?"}]
            extra = {}
        elif workload == "random":
            k = rng.randint(75, 300)  # words; ~1.3 tokens each
            msgs = [{"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(k))}]
            extra = {}
        elif workload == "json":
            msgs = [{"role": "user", "content": f"Describe person number {i} as JSON with name, "
                                                "age and city."}]
            extra = {"response_format": {"type": "json_schema", "json_schema": {
                "name": "person", "schema": SCHEMA, "strict": True}}}
        else:
            raise SystemExit(f"unknown workload {workload}")
        body = {"model": model, "messages": msgs, "max_tokens": max_tokens, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        if workload != "json":
            body["ignore_eos"] = True  # every server generates max_tokens: same work
        body.update(extra)
        out.append(body)
    return out


class Result:
    __slots__ = ("ok", "error", "ttft", "tpot", "tokens", "e2e")

    def __init__(self):
        self.ok, self.error, self.ttft, self.tpot, self.tokens, self.e2e = False, "", 0, 0, 0, 0


async def read_response_head(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdr = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            hdr[k.strip().lower()] = v.strip()
    return status, hdr


async def body_chunks(reader, hdr):
    if hdr.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    elif "content-length" in hdr:
        yield await reader.readexactly(int(hdr["content-length"]))
    else:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            yield data


class Conn:
    def __init__(self, host, port, headers):
        self.host, self.port, self.headers = host, port, headers
        self.reader = self.writer = None

    async def open(self):
        """Opens a connection unless one is kept alive; True if it is new."""
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            return True
        return False

    def close(self):
        if self.writer:
            self.writer.close()
            self.writer = None

    async def stream(self, path, body, res, abort_after=None):
        """POSTs body and reads SSE events; abort_after=k closes after k deltas."""
        fresh = await self.open()
        data = json.dumps(body).encode()
        req = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(data)}\r\n{self.headers}\r\n").encode() + data
        async def send():
            self.writer.write(req)
            await self.writer.drain()
            return await read_response_head(self.reader)

        t0 = time.perf_counter()
        try:
            status, hdr = await send()
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            # A kept-alive connection the server closed while it was idle
            # (llama-server does so) answers nothing: retry once on a new
            # one, as HTTP clients do; the clock restarts with the resend.
            if fresh or (isinstance(e, asyncio.IncompleteReadError) and e.partial):
                raise
            self.close()
            await self.open()
            t0 = time.perf_counter()
            status, hdr = await send()
        times = []
        usage = None
        buf = b""
        async for chunk in body_chunks(self.reader, hdr):
            if status != 200:
                buf += chunk
                continue
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                if not ev.startswith(b"data: "):
                    continue
                payload = ev[6:]
                if payload == b"[DONE]":
                    continue
                obj = json.loads(payload)
                if obj.get("usage"):
                    usage = obj["usage"]
                if "error" in obj:
                    res.error = obj["error"].get("message", "error")
                for ch in obj.get("choices") or []:
                    d = ch.get("delta") or {}
                    if d.get("content") or ch.get("text"):
                        times.append(time.perf_counter())
                        if abort_after is not None and len(times) >= abort_after:
                            self.close()
                            res.error = "aborted"
                            return
        if hdr.get("connection", "").lower() == "close":
            self.close()
        res.e2e = time.perf_counter() - t0
        if status != 200:
            res.error = f"HTTP {status}: {buf[:200].decode('utf-8', 'replace')}"
            return
        if not times:
            res.error = res.error or "no tokens"
            return
        res.tokens = usage["completion_tokens"] if usage else len(times)
        res.ttft = times[0] - t0
        res.tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
        res.ok = not res.error


async def run_level(url, headers, bodies, concurrency, timeout):
    u = urllib.parse.urlparse(url)
    host, port = u.hostname, u.port or 80
    queue = list(enumerate(bodies))
    results = [None] * len(bodies)

    async def client():
        conn = Conn(host, port, headers)
        while queue:
            i, body = queue.pop(0)
            r = Result()
            try:
                path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
                await asyncio.wait_for(conn.stream(path, body, r), timeout)
            except Exception as e:  # noqa: BLE001 - every failure is counted
                r.error = f"{type(e).__name__}: {e}"
                conn.close()
            results[i] = r
        conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return results, time.perf_counter() - t0


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def summarize(results, wall):
    ok = [r for r in results if r.ok]
    toks = sum(r.tokens for r in ok)
    errors = [r.error for r in results if not r.ok]
    return {"requests": len(results), "ok": len(ok), "errors": len(errors),
            "first_error": errors[0] if errors else "",
            "output_tok_s": toks / wall if wall > 0 else 0.0,
            "ttft_p50_ms": 1000 * pct([r.ttft for r in ok], 50),
            "ttft_p99_ms": 1000 * pct([r.ttft for r in ok], 99),
            "tpot_p50_ms": 1000 * pct([r.tpot for r in ok if r.tpot > 0], 50),
            "wall_s": wall, "output_tokens": toks}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--label", default="server")
    ap.add_argument("--model", default="",
                    help="model id to send (default: the first one /v1/models lists)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--workload", default="fewshot,random,json")
    ap.add_argument("--concurrency", default="1,16,32")
    ap.add_argument("--requests", type=int, default=0,
                    help="requests per level (default: max(8, 4 x concurrency))")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompt-tokens", type=int, default=200, help="tokens workload")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--warmup", type=int, default=2, help="requests sent before each level")
    ap.add_argument("--json", help="append one JSON line per level to this file")
    a = ap.parse_args()
    headers = f"Authorization: Bearer {a.api_key}\r\n" if a.api_key else ""
    if not a.model:
        import urllib.request
        req = urllib.request.Request(a.url.rstrip("/") + "/v1/models")
        if a.api_key:
            req.add_header("Authorization", f"Bearer {a.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                a.model = json.loads(r.read())["data"][0]["id"]
        except Exception as e:  # noqa: BLE001
            raise SystemExit(f"cannot list the models at {a.url}: {e}")
    rows = []
    for wl in a.workload.split(","):
        for c in (int(x) for x in a.concurrency.split(",")):
            n = a.requests or max(8, 4 * c)
            bodies = make_requests(wl, n + a.warmup, a.max_tokens, a.seed, a.model,
                                   a.prompt_tokens)
            if a.warmup:
                asyncio.run(run_level(a.url, headers, bodies[:a.warmup], 1, a.timeout))
            res, wall = asyncio.run(run_level(a.url, headers, bodies[a.warmup:], c, a.timeout))
            row = {"label": a.label, "workload": wl, "concurrency": c, **summarize(res, wall)}
            rows.append(row)
            print(f"{a.label:10s} {wl:8s} c={c:<3d} {row['output_tok_s']:8.1f} tok/s  "
                  f"TTFT p50 {row['ttft_p50_ms']:8.1f} ms p99 {row['ttft_p99_ms']:8.1f} ms  "
                  f"TPOT p50 {row['tpot_p50_ms']:6.2f} ms  ok {row['ok']}/{row['requests']}"
                  + (f"  first error: {row['first_error'][:120]}" if row["errors"] else ""),
                  flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(row) + "\n")
    return 0 if all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
