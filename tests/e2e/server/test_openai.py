"""The OpenAI API through the official `openai` client: chat, completions,
streaming with usage, structured outputs, n, logprobs, the radix cache
in usage, and every error case the server promises."""
import json
import re
import threading
import time

import jsonschema
import openai
import pytest

from conftest import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1"


def test_models(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_chat(client):
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "What is the capital of France?"}],
        max_tokens=24, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert "Paris" in c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 10
    assert 0 < r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens >= 0
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")


def test_chat_text_parts_and_greedy_is_deterministic(client):
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Name a color."}]}]
    a = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0)
    b = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content


def test_seed_reproducible(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me a word."}],
              max_tokens=8, temperature=1.0, seed=1234)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert a.choices[0].message.content == b.choices[0].message.content


def test_completions_batch_and_n(client):
    r = client.completions.create(model=MODEL, prompt=["The sky is", "Water is"], n=2,
                                  max_tokens=4, temperature=0.8, seed=7)
    assert len(r.choices) == 4
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage.completion_tokens == 16


def test_stop_string(client):
    r = client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=20,
                                  temperature=0, stop=[" 7"])
    assert " 7" not in r.choices[0].text
    assert r.choices[0].finish_reason == "stop"


def test_stream_chat_with_usage(client):
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("stop", "length") and all(f is None for f in finishes[:-1])
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    full = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=12, temperature=0)
    assert text == full.choices[0].message.content


def test_stream_completions_n2(client):
    stream = client.completions.create(model=MODEL, prompt="Once upon a time", n=2,
                                       max_tokens=6, temperature=0.9, stream=True)
    texts = {0: "", 1: ""}
    done = set()
    for c in stream:
        for ch in c.choices:
            texts[ch.index] += ch.text
            if ch.finish_reason:
                done.add(ch.index)
    assert done == {0, 1} and all(texts.values())


def test_logprobs_chat(client):
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say yes."}], max_tokens=5,
        temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        assert e.top_logprobs[0].logprob >= e.top_logprobs[-1].logprob
        assert bytes(e.bytes).decode("utf-8", "replace") is not None
    # greedy: the chosen token is the most likely one
    assert all(abs(e.logprob - e.top_logprobs[0].logprob) < 1e-4 for e in content)


def test_regex_and_choices(client):
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Give a date."}], max_tokens=20,
        temperature=0, extra_body={"regex": r"20[0-9]{2}-[01][0-9]-[0-3][0-9]"})
    import re
    assert re.fullmatch(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]", r.choices[0].message.content)
    assert r.choices[0].finish_reason == "stop"
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Is fire hot?"}], max_tokens=8,
        extra_body={"choices": ["yes (sure)", "no.", "a+b?"]})
    assert r.choices[0].message.content in ("yes (sure)", "no.", "a+b?")


SCHEMA = {"type": "object", "properties": {"name": {"type": "string"},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def test_json_schema_response_format(client):
    """The output validates against the schema (jsonschema), greedy and
    sampled; a schema the compiler refuses is a 400 that says why."""
    for temperature in (0, 0.8):
        r = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "A person as JSON."}],
            max_tokens=80, temperature=temperature, seed=7,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}})
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
        jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=4,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "bad", "schema": {"type": "frobnicate"}}})
    assert e.value.status_code == 400


def test_json_whitespace_extension(client):
    """`whitespace: compact` leaves no byte between JSON tokens; an unknown
    mode is a 400 naming the field."""
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "A person as JSON."}],
        max_tokens=80, temperature=0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}},
        extra_body={"whitespace": "compact"})
    text = r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop", text
    assert text == json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False), text
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=4,
            extra_body={"whitespace": "tabs", "regex": "a"})
    assert e.value.status_code == 400 and "whitespace" in e.value.message


INT_SCHEMA = {"type": "object",
              "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 150},
                             "year": {"type": "integer"},
                             "scores": {"type": "array", "maxItems": 3,
                                        "items": {"type": "integer", "multipleOf": 5,
                                                  "minimum": -100, "maximum": 100}}},
              "required": ["age", "year", "scores"], "additionalProperties": False}


def test_json_numbers_integers(client):
    """An integer schema in response_format gives plain digits by default
    (never 1.0, 1e5 or -0), greedy and sampled; `json_numbers` takes
    "canonical" or "full", anything else is a 400 naming the field."""
    def plain_int(s):
        assert re.fullmatch(r"0|-?[1-9][0-9]*", s), s
        return int(s)

    def no_float(s):
        raise AssertionError(f"an integer written as {s!r}")

    for temperature, extra in ((0, None), (1.0, None), (1.0, {"json_numbers": "canonical"})):
        for seed in (1, 2, 3):
            r = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "A person's age, birth year "
                                        "and test scores as JSON, with decimals."}],
                max_tokens=100, temperature=temperature, seed=seed, extra_body=extra,
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "p", "schema": INT_SCHEMA}})
            text = r.choices[0].message.content
            if r.choices[0].finish_reason == "stop":
                v = json.loads(text, parse_int=plain_int, parse_float=no_float)
                jsonschema.validate(v, INT_SCHEMA)
            else:  # cut by max_tokens: the prefix still has no fraction or exponent
                assert not re.search(r"[0-9][.eE]", text), text
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "A person as JSON."}],
        max_tokens=100, temperature=0, extra_body={"json_numbers": "full"},
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": INT_SCHEMA}})
    assert r.choices[0].finish_reason in ("stop", "length")
    for bad in ("exact", 1, "FULL"):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                extra_body={"json_numbers": bad},
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "p", "schema": INT_SCHEMA}})
        assert e.value.status_code == 400 and "json_numbers" in e.value.message, e.value.message


def test_json_object_response_format(client):
    """Any JSON object: complete when the model stops, a prefix of one
    when max_tokens cuts it."""
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Any JSON object."}],
        max_tokens=200, temperature=0, response_format={"type": "json_object"})
    text = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:
        assert r.choices[0].finish_reason == "length" and text.lstrip().startswith("{")


def test_cached_tokens_on_repeated_prefix(client):
    system = "You are a helpful assistant. " + " ".join(
        f"Fact {i}: the number {i} follows {i - 1}." for i in range(1, 60))
    kw = dict(model=MODEL, max_tokens=2, temperature=0)
    a = client.chat.completions.create(messages=[{"role": "system", "content": system},
                                                 {"role": "user", "content": "Hi"}], **kw)
    b = client.chat.completions.create(messages=[{"role": "system", "content": system},
                                                 {"role": "user", "content": "Hello"}], **kw)
    assert a.usage.prompt_tokens > 300
    assert b.usage.prompt_tokens_details.cached_tokens > 300


# ---- errors ----

def err(server, path, body, status, code=None, param=None, text=None, **kw):
    s, r = server.post(path, body, **kw) if body is not None else server.get(path, **kw)
    assert s == status, r
    e = r["error"]
    assert set(e) == {"message", "type", "param", "code"}
    if code is not None:
        assert e["code"] == code, e
    if param is not None:
        assert e["param"] == param, e
    if text is not None:
        assert text in e["message"], e
    return e


def test_errors_malformed(server):
    err(server, "/v1/chat/completions", '{"messages": [', 400, text="not valid JSON")
    err(server, "/v1/chat/completions", "[]", 400, text="JSON object")
    err(server, "/v1/chat/completions", {"messages": "hi"}, 400, param="messages")
    err(server, "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, 400,
        param="temperature")
    err(server, "/v1/chat/completions",
        {"messages": [{"role": "wizard", "content": "x"}]}, 400, param="messages[0]")
    err(server, "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400,
        param="max_tokens")
    err(server, "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "n": 1000}, 400, param="n")
    err(server, "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "stop": ["a"] * 17}, 400, param="stop")
    err(server, "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "stop": "s" * 300}, 400, param="stop")
    err(server, "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 50, "logprobs": True},
        400, param="top_logprobs")
    err(server, "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "logit_bias": {"abc": 1}}, 400,
        param="logit_bias")
    err(server, "/v1/completions", {"prompt": "x", "echo": 1}, 400, param="echo")
    err(server, "/v1/completions", {"prompt": "x", "echo": True, "logprobs": 1, "stream": True,
                                    "n": 2}, 400, param="echo")
    err(server, "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, 400,
        param="tools[0]")


def test_errors_constraints(server):
    e = err(server, "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "regex": "a(b"}, 400,
            code="invalid_constraint")
    assert e["message"].count("at byte 1") == 1, e  # the position, said once
    err(server, "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "regex": "a", "choices": ["b"]}, 400,
        param="choices")
    err(server, "/generate",
        {"text": "x", "sampling_params": {"regex": "(?=a)b"}}, 400, code="unsupported_constraint")
    # an unresolved $ref is the schema's fault too, named as such
    e = err(server, "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "response_format": {
                "type": "json_schema", "json_schema": {"name": "s", "schema": {
                    "$ref": "#/$defs/missing"}}}}, 400, code="invalid_constraint")
    assert "missing" in e["message"], e


def test_errors_model_route_method(server):
    err(server, "/v1/chat/completions",
        {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}, 404,
        code="model_not_found", param="model")
    err(server, "/v1/nothing", None, 404, code="unknown_url")
    err(server, "/v1/chat/completions", None, 405, code="method_not_allowed")


def test_error_prompt_too_long(server):
    e = err(server, "/v1/completions", {"prompt": "word " * 2100, "max_tokens": 4}, 400,
            code="context_length_exceeded")
    assert "context" in e["message"]


def test_error_body_too_large(server):
    s, r = server.post("/v1/completions", {"prompt": "x" * 70000})
    assert s == 413 and "limit" in r["error"]["message"]


def test_generate_native(server):
    s, r = server.post("/generate", {"text": "The capital of France is",
                                     "sampling_params": {"max_new_tokens": 6, "temperature": 0},
                                     "return_logprob": True, "top_logprobs_num": 2})
    assert s == 200, r
    assert r["text"] and len(r["output_ids"]) == 6
    m = r["meta_info"]
    assert m["finish_reason"] == {"type": "length", "length": 6}
    assert m["prompt_tokens"] > 0 and m["completion_tokens"] == 6
    assert len(m["output_token_logprobs"]) == 6
    assert all(len(t) == 2 for t in m["output_top_logprobs"])
    s, r = server.post("/generate", {"text": ["a", "b"], "sampling_params": {"max_new_tokens": 2}})
    assert s == 200 and isinstance(r, list) and len(r) == 2
    s, r = server.post("/generate", {"input_ids": [504, 3575, 282], "sampling_params":
                                     {"max_new_tokens": 3, "stop_token_ids": [2]}})
    assert s == 200 and len(r["output_ids"]) <= 3


def test_raw_prompts_parse_special_tokens(server):
    """/generate `text` and /v1/completions `prompt` read `<|im_start|>` as the control token
    (SGLang, llama-server and vLLM do); /tokenize agrees; token ids stay literal."""
    s, tok = server.post("/tokenize", {"prompt": "<|im_start|>user"})
    assert s == 200 and tok["count"] == 2 and tok["tokens"][0] == 1  # <|im_start|> is id 1
    s, r = server.post("/generate", {"text": "<|im_start|>user",
                                     "sampling_params": {"max_new_tokens": 1}})
    assert s == 200 and r["meta_info"]["prompt_tokens"] == 2, r
    s, r = server.post("/v1/completions", {"model": MODEL, "prompt": "<|im_start|>user",
                                           "max_tokens": 1})
    assert s == 200 and r["usage"]["prompt_tokens"] == 2, r
    # a chat turn rendered by the client through /generate costs what the chat route costs
    turn = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    s, r = server.post("/generate", {"text": turn, "sampling_params": {"max_new_tokens": 1}})
    s2, t = server.post("/tokenize", {"prompt": turn})
    assert s == 200 and s2 == 200 and r["meta_info"]["prompt_tokens"] == t["count"] < 12


def test_generate_jump_forward_switch(server):
    """jump_forward false samples every token: nothing forced, the same valid JSON."""
    schema = {"type": "object", "properties": {"first_name": {"type": "string", "maxLength": 8},
                                               "year_of_birth": {"type": "integer"}},
              "required": ["first_name", "year_of_birth"], "additionalProperties": False}
    out = {}
    for jf in (True, False):
        _, before = server.get("/metrics")
        s, r = server.post("/generate", {"text": "A person as JSON:", "sampling_params": {
            "max_new_tokens": 64, "temperature": 0, "json_schema": json.dumps(schema),
            "jump_forward": jf}})
        assert s == 200 and r["meta_info"]["finish_reason"]["type"] == "stop", r
        jsonschema.validate(json.loads(r["text"]), schema)
        _, after = server.get("/metrics")

        def forced(text):
            line = [x for x in text.split("\n")
                    if x.startswith("trellis_jump_forward_tokens_total ")][0]
            return float(line.split()[1])
        out[jf] = forced(after) - forced(before)
    assert out[True] > 0 and out[False] == 0, out


def test_generate_stream(server):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    c.request("POST", "/generate", body=json.dumps(
        {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 5}}))
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    events = [line[6:] for line in r.read().decode().split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    objs = [json.loads(e) for e in events[:-1]]
    # SGLang streams the text so far
    assert all(objs[i + 1]["text"].startswith(objs[i]["text"]) for i in range(len(objs) - 1))
    assert objs[-1]["meta_info"]["finish_reason"]["type"] == "length"


def test_tokenize_detokenize(server):
    s, r = server.post("/tokenize", {"prompt": "Hello world"})
    assert s == 200 and r["count"] == len(r["tokens"]) > 0
    s, d = server.post("/detokenize", {"tokens": r["tokens"]})
    assert s == 200 and d["text"] == "Hello world"
    s, _ = server.post("/detokenize", {"tokens": [-1]})
    assert s == 400


def test_info_metrics_health(server):
    s, _ = server.get("/health")
    assert s == 200
    s, _ = server.get("/health_generate")
    assert s == 200
    for path in ("/server_info", "/get_server_info"):
        s, r = server.get(path)
        assert s == 200 and r["engine"]["pages_total"] > 0 and r["context_length"] == 2048
    for path in ("/model_info", "/get_model_info"):
        s, r = server.get(path)
        assert s == 200 and r["is_generation"] is True
        # the GGUF's template text (SmolLM2: ChatML, in Jinja)
        assert "<|im_start|>" in r["chat_template"] and "{%" in r["chat_template"]
    s, text = server.get("/metrics")
    assert s == 200
    for series in ("trellis_requests_running", "trellis_requests_waiting",
                   "trellis_prompt_tokens_total", "trellis_generation_tokens_total",
                   "trellis_time_to_first_token_seconds_bucket",
                   "trellis_time_per_output_token_seconds_count",
                   "trellis_e2e_request_latency_seconds_sum", "trellis_queue_time_seconds_bucket",
                   "trellis_radix_cache_hit_rate", "trellis_kv_pages_used",
                   "trellis_kv_pages_free", "trellis_grammar_cache_hits_total",
                   "trellis_engine_steps_total", "trellis_jump_forward_tokens_total",
                   "trellis_forward_passes_saved_total"):
        assert f"\n{series}" in text, series
    s, r = server.post("/flush_cache", {})
    assert s == 200 and r["success"]


def test_disconnect_cancels_and_frees_pages(server):
    import socket
    body = json.dumps({"messages": [{"role": "user", "content": "Write a long story."}],
                       "max_tokens": 1500, "stream": True, "ignore_eos": True}).encode()
    for stream in (True, False):
        b = body if stream else body.replace(b'"stream": true', b'"stream": false')
        sk = socket.create_connection(("127.0.0.1", server.port))
        sk.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                   + str(len(b)).encode() + b"\r\n\r\n" + b)
        if stream:
            got = b""
            while got.count(b"data: ") < 3:
                got += sk.recv(4096)
        else:
            deadline = time.time() + 30
            while server.engine()["running"] == 0 and time.time() < deadline:
                time.sleep(0.02)
        sk.close()
        e = server.wait_idle(timeout=30)
        assert e["pages_used"] == 0


def test_api_key():
    s = Server("--api-key", "s3cret-key-value")
    try:
        assert s.get("/health")[0] == 200  # public
        st, r = s.get("/v1/models")
        assert st == 401 and r["error"]["code"] == "invalid_api_key"
        st, r = s.get("/v1/models", headers={"Authorization": "Bearer wrong"})
        assert st == 401 and "wrong" in r["error"]["message"]
        st, r = s.get("/v1/models", headers={"Authorization": "Bearer s3cret-key-value"})
        assert st == 200
        import openai as oa
        c = oa.OpenAI(base_url=s.base + "/v1", api_key="s3cret-key-value", max_retries=0)
        assert c.models.list().data[0].id == MODEL
        with pytest.raises(oa.AuthenticationError):
            oa.OpenAI(base_url=s.base + "/v1", api_key="nope", max_retries=0).models.list()
    finally:
        s.stop()
    assert "s3cret-key-value" not in s.read_log()


def test_queue_full_429():
    s = Server("--max-running", "1", "--max-queue", "0")
    try:
        results = []

        def long_req():
            results.append(s.post("/v1/completions", {"prompt": "Story:", "max_tokens": 200,
                                                      "ignore_eos": True}))
        t = threading.Thread(target=long_req)
        t.start()
        deadline = time.time() + 10
        while s.get("/server_info")[1]["in_flight"] == 0 and time.time() < deadline:
            time.sleep(0.01)
        st, r = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert st == 429 and r["error"]["code"] == "queue_full"
        t.join()
        assert results[0][0] == 200
        st, _ = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert st == 200
    finally:
        s.stop()


def test_sigterm_lets_inflight_finish():
    s = Server()
    results = []

    def long_req():
        results.append(s.post("/v1/completions", {"prompt": "Story:", "max_tokens": 60,
                                                  "ignore_eos": True}))
    t = threading.Thread(target=long_req)
    t.start()
    # generous: under ASan on a loaded machine the request takes seconds to arrive
    deadline = time.time() + 60
    while not s.get("/server_info")[1]["in_flight"] and not results:
        assert time.time() < deadline, "the request never got in flight"
        time.sleep(0.01)
    s.proc.send_signal(__import__("signal").SIGTERM)
    t.join()
    assert results[0][0] == 200 and results[0][1]["usage"]["completion_tokens"] == 60
    s.stop(expect=0)


# ---- completions echo (issue 34) ----

def test_completions_echo_logprobs(client, server):
    """echo: the prompt before the text; with logprobs the prompt's tokens first (the first
    token's log-prob null, text_offset into the echoed text), also with max_tokens 0
    (lm-evaluation-harness's log-likelihood requests)."""
    prompt = "The quick brown fox"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=0, echo=True,
                                  logprobs=2)
    c = r.choices[0]
    assert c.text == prompt and c.finish_reason == "length"
    lp = c.logprobs
    n = r.usage.prompt_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == n
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x < 0 for x in lp.token_logprobs[1:])
    assert "".join(lp.tokens) == prompt
    assert lp.text_offset == [len("".join(lp.tokens[:i]).encode()) for i in range(n)]
    assert all(len(t) >= 1 for t in lp.top_logprobs[1:])
    # with a completion: the prompt's entries, then the completion's
    r2 = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, echo=True,
                                   logprobs=1, temperature=0)
    c2 = r2.choices[0]
    assert c2.text.startswith(prompt) and len(c2.text) > len(prompt)
    lp2 = c2.logprobs
    assert len(lp2.tokens) == n + 4
    assert lp2.token_logprobs[0] is None
    assert lp2.token_logprobs[1:n] == pytest.approx(lp.token_logprobs[1:], abs=1e-5)
    assert lp2.text_offset[n] == len(prompt.encode())
    assert "".join(lp2.tokens) == c2.text
    # the generated tokens' log-probs match their prompt log-probs when echoed back
    r3 = client.completions.create(model=MODEL, prompt=c2.text, max_tokens=0, echo=True,
                                   logprobs=0)
    lp3 = r3.choices[0].logprobs
    if lp3.tokens == lp2.tokens:  # the text re-tokenizes the same
        for a, b in zip(lp3.token_logprobs[n:], lp2.token_logprobs[n:]):
            assert abs(a - b) < 2e-3
    # echo without logprobs; and a token-id prompt echoes its text
    r4 = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, echo=True)
    assert r4.choices[0].text.startswith(prompt) and r4.choices[0].logprobs is None
    ids = server.post("/tokenize", {"prompt": prompt})[1]["tokens"]
    s, r5 = server.post("/v1/completions", {"prompt": ids, "max_tokens": 0, "echo": True})
    assert s == 200 and r5["choices"][0]["text"] == prompt


def test_completions_echo_stream(client):
    """Streamed echo: the prompt (with its log-probs) in the choice's first chunk."""
    prompt = "Once upon a time"
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=3,
                                            echo=True, logprobs=1, temperature=0,
                                            stream=True))
    assert chunks[0].choices[0].text == prompt
    first = chunks[0].choices[0].logprobs
    assert first.token_logprobs[0] is None and "".join(first.tokens) == prompt
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, echo=True,
                                      logprobs=1, temperature=0)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    offs = [o for c in chunks if c.choices and c.choices[0].logprobs
            for o in c.choices[0].logprobs.text_offset]
    assert offs == whole.choices[0].logprobs.text_offset


# ---- speculative decoding (issue 29) ----

def test_spec_ngram_same_output(server):
    """A server with --spec-ngram gives the same completions as one without, greedy and
    sampled (seeded), and says in usage nothing different."""
    s = Server("--spec-ngram", "8")
    try:
        prompt = ("Copy the text.\nText: the red fox ran over the green hill, and the red fox "
                  "ran back over the green hill.\nCopy: the red fox")
        for temp in (0, 0.9):
            body = {"prompt": prompt, "max_tokens": 40, "temperature": temp, "seed": 5, "n": 2}
            sa, a = server.post("/v1/completions", body)
            sb, b = s.post("/v1/completions", body)
            assert sa == sb == 200
            assert [c["text"] for c in a["choices"]] == [c["text"] for c in b["choices"]]
            assert a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"]
            # per request, on a server without the flag (and off on one with it)
            sc, c = server.post("/v1/completions", dict(body, spec_ngram=6))
            sd, d = s.post("/v1/completions", dict(body, spec_ngram=0))
            assert sc == sd == 200
            assert [x["text"] for x in c["choices"]] == [x["text"] for x in a["choices"]]
            assert [x["text"] for x in d["choices"]] == [x["text"] for x in a["choices"]]
            # the same through "speculate" (as --speculate)
            se, e1 = server.post("/v1/completions", dict(body, speculate="ngram"))
            sf, f1 = s.post("/v1/completions", dict(body, speculate="off"))
            assert se == sf == 200
            assert [x["text"] for x in e1["choices"]] == [x["text"] for x in a["choices"]]
            assert [x["text"] for x in f1["choices"]] == [x["text"] for x in a["choices"]]
        st, e = server.post("/v1/completions", {"prompt": "x", "spec_ngram": 33})
        assert st == 400 and e["error"]["param"] == "spec_ngram", e
        for bad in ({"speculate": "fast"}, {"speculate": "off", "spec_ngram": 4},
                    {"speculate": "ngram", "spec_ngram": 0},
                    {"speculate": "draft", "spec_ngram": 2}):
            st, e = server.post("/v1/completions", dict(bad, prompt="x"))
            assert st == 400 and e["error"]["param"] == "speculate", (bad, e)
        st, e = server.post("/v1/completions", {"prompt": "x", "speculate": "off",
                                                 "spec_draft": 3})
        assert "contradicts 'spec_draft'" in e["error"]["message"], e
        st, text = server.get("/metrics")
        assert float(re.search(r"\ntrellis_spec_draft_tokens_total (\S+)", text).group(1)) > 0
        st, text = s.get("/metrics")
        assert st == 200
        drafted = float(re.search(r"\ntrellis_spec_draft_tokens_total (\S+)", text).group(1))
        kept = float(re.search(r"\ntrellis_spec_accepted_tokens_total (\S+)", text).group(1))
        assert drafted > 0 and 0 < kept <= drafted, text
    finally:
        s.stop()


def _strict_keys(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"repeated key in {keys}"
    return dict(pairs)


def test_no_repeated_keys_sampled(client):
    """Objects whose keys the schema leaves free (additionalProperties,
    json_object) never repeat a key: many sampled outputs, every object
    of every finished one checked by a parser that refuses repeats."""
    schemas = [
        # six possible keys: without the rule this model repeats them
        # ({"a":1,"b":2,"a":2,"b":2} at seed 0..2 before it)
        {"type": "object", "patternProperties": {"^[ab]{1,2}$": {"type": "integer"}},
         "additionalProperties": False},
        {"type": "object", "additionalProperties": {"type": "integer"}},
        {"type": "object", "properties": {"name": {"type": "string"}},
         "additionalProperties": {"type": "object", "additionalProperties": {"enum": [1, 2]}}},
    ]
    finished = 0
    for i, schema in enumerate(schemas):
        for seed in range(4):
            r = client.chat.completions.create(
                model="default", max_tokens=120, temperature=1.0, seed=seed, n=8,
                messages=[{"role": "user", "content": "Count the letters: a JSON object with "
                                                      "keys a and b and more."}],
                response_format={"type": "json_schema",
                                 "json_schema": {"name": f"s{i}", "schema": schema}})
            for ch in r.choices:
                if ch.finish_reason != "stop":
                    continue
                json.loads(ch.message.content, object_pairs_hook=_strict_keys)
                finished += 1
    r = client.chat.completions.create(
        model="default", max_tokens=120, temperature=1.2, seed=9, n=8,
        messages=[{"role": "user", "content": "A JSON object with the same key twice."}],
        response_format={"type": "json_object"})
    for ch in r.choices:
        if ch.finish_reason == "stop":
            json.loads(ch.message.content, object_pairs_hook=_strict_keys)
            finished += 1
    assert finished >= 10, finished


def test_distinct_strings_sampled(client):
    """uniqueItems over strings (the matcher's tracker): many sampled
    outputs of a list the model tends to repeat, every finished one
    validated by jsonschema (which checks uniqueItems)."""
    import jsonschema
    schema = {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
                 "minItems": 3, "maxItems": 6, "uniqueItems": True}},
        "required": ["tags"], "additionalProperties": False}
    finished = 0
    for seed in range(4):
        r = client.chat.completions.create(
            model="default", max_tokens=100, temperature=1.0, seed=seed, n=8,
            messages=[{"role": "user", "content": "Tags for a post about cats: cat, cat, "
                                                  "cat, cats."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "tags", "schema": schema}})
        for ch in r.choices:
            if ch.finish_reason != "stop":
                continue
            jsonschema.validate(json.loads(ch.message.content), schema)
            finished += 1
    assert finished >= 8, finished


def test_distinct_items_sampled(client):
    """uniqueItems over objects and numbers (the tracker's canonical
    forms): sampled lists the model tends to repeat, every finished one
    validated by jsonschema (1 and 1.0 are one item; objects equal
    whatever their member order)."""
    import jsonschema
    schema = {"type": "object", "properties": {
        "points": {"type": "array", "minItems": 3, "maxItems": 5, "uniqueItems": True,
                   "items": {"type": "object", "properties": {
                       "x": {"type": "integer", "minimum": 0, "maximum": 2},
                       "y": {"type": "integer", "minimum": 0, "maximum": 2}},
                       "required": ["x", "y"], "additionalProperties": False}},
        "weights": {"type": "array", "minItems": 3, "maxItems": 5, "uniqueItems": True,
                    "items": {"type": "number"}}},
        "required": ["points", "weights"], "additionalProperties": False}
    finished = 0
    for seed in range(4):
        r = client.chat.completions.create(
            model="default", max_tokens=160, temperature=1.0, seed=seed, n=8,
            messages=[{"role": "user", "content": "Points (0,0), (0,0), (0,0) and weights "
                                                  "1, 1, 1.0 as JSON."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "pts", "schema": schema}})
        for ch in r.choices:
            if ch.finish_reason != "stop":
                continue
            jsonschema.validate(json.loads(ch.message.content), schema)
            finished += 1
    assert finished >= 8, finished


def test_integers_beyond_64_bits(client, server):
    """A JSON Schema's integers beyond 64 bits are taken as written (the
    output lands in the exact range); a field with a smaller range refuses
    them by name."""
    lo, hi = 2 ** 64 - 1, 2 ** 64 + 1
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": lo,
                                                     "maximum": hi}},
              "required": ["n"], "additionalProperties": False}
    finished = 0
    for seed in range(3):
        r = client.chat.completions.create(
            model="default", max_tokens=60, temperature=1.0, seed=seed,
            messages=[{"role": "user", "content": "A very large number, as JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
        ch = r.choices[0]
        if ch.finish_reason == "stop":
            n = json.loads(ch.message.content)["n"]
            assert isinstance(n, int) and lo <= n <= hi, ch.message.content
            finished += 1
    assert finished >= 1
    status, body = server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "seed": 2 ** 64})
    assert status == 400, body
    assert body["error"]["param"] == "seed" and str(2 ** 64) in body["error"]["message"], body
