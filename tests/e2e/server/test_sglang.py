"""What SGLang's clients (its frontend's RuntimeEndpoint, its router) and
OpenAI clients read beyond the basics: /get_model_info's model_path,
prefill-only requests (max_new_tokens 0), min_new_tokens / min_tokens,
matched_stop, stop_regex, routes that are not offered
answered at once, streaming with n > 1, the last streamed completion chunk,
and assistant prefill. docs/compatibility.md is kept true by these."""
import json
import re
import time

import pytest

from conftest import raw_connect, read_all


def sse_events(server, path, body):
    """The data: payloads of a streamed answer, parsed ([DONE] last)."""
    s = raw_connect(server.port)
    data = json.dumps(body).encode()
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Type: application/json\r\nContent-Length: " +
              str(len(data)).encode() + b"\r\n\r\n" + data)
    raw = read_all(s, 60)
    s.close()
    head, _, body_raw = raw.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0], raw[:500]
    # de-chunk
    out, rest = b"", body_raw
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out += rest[:n]
        rest = rest[n + 2:]
    events = []
    for line in out.decode().split("\n"):
        if line.startswith("data: "):
            p = line[6:]
            events.append(p if p == "[DONE]" else json.loads(p))
    assert events and events[-1] == "[DONE]", out[-500:]
    return events[:-1]


def test_model_info_for_sglang_clients(server):
    # the frontend (RuntimeEndpoint) reads /get_model_info["model_path"]
    st, r = server.get("/get_model_info")
    assert st == 200 and r["model_path"] == r["served_model_name"] == r["model_id"]
    assert ".gguf" not in json.dumps(r) and "/" not in r["model_path"]
    assert r["is_generation"] is True and r["max_context_length"] == 2048
    assert r["vocab_size"] > 0
    # the router reads /model_info first and would fetch a tokenizer for a
    # model_path or tokenizer_path it cannot find on its disk
    st, r = server.get("/model_info")
    assert st == 200 and "model_path" not in r and "tokenizer_path" not in r


def test_prefill_only_generate(server):
    server.post("/flush_cache", {})
    prompt = "The quick brown fox jumps over the lazy dog. " * 6
    st, r = server.post("/generate", {"text": prompt, "sampling_params": {"max_new_tokens": 0}})
    assert st == 200, r
    m = r["meta_info"]
    assert r["text"] == "" and r["output_ids"] == []
    assert m["finish_reason"] == {"type": "length", "length": 0}
    assert m["matched_stop"] is None
    assert m["completion_tokens"] == 0 and m["prompt_tokens"] > 32
    # its pages are in the radix cache: the next request finds them
    st, r2 = server.post("/generate", {"text": prompt + "It",
                                       "sampling_params": {"max_new_tokens": 2}})
    assert st == 200 and r2["meta_info"]["cached_tokens"] >= 32, r2
    # a batch of prefill-only prompts (SGLang's frontend caches prefixes so)
    st, r = server.post("/generate", {"text": ["a b c", "d e f"],
                                      "sampling_params": {"max_new_tokens": 0, "n": 1}})
    assert st == 200 and [x["text"] for x in r] == ["", ""], r
    # streamed: one last event, then [DONE]
    ev = sse_events(server, "/generate", {"text": "hello there", "stream": True,
                                          "sampling_params": {"max_new_tokens": 0}})
    assert len(ev) == 1 and ev[0]["text"] == ""
    assert ev[0]["meta_info"]["finish_reason"]["type"] == "length"
    server.wait_idle()


def test_prefill_only_completions(client, server):
    r = client.completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt="Once upon a time",
                                  max_tokens=0)
    c = r.choices[0]
    assert c.text == "" and c.finish_reason == "length"
    assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens > 0
    # chat completions keep OpenAI's minimum of 1
    st, e = server.post("/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})
    assert st == 400 and e["error"]["param"] == "max_tokens"


def eos_run(server, **extra):
    # the end-of-turn token made the greedy choice by logit_bias
    body = {"prompt": "Count: 1, 2, 3,", "max_tokens": 12, "temperature": 0,
            "logit_bias": {"2": 100}}
    body.update(extra)
    st, r = server.post("/v1/completions", body)
    assert st == 200, r
    return r


def test_min_tokens_and_matched_stop(server):
    r = eos_run(server)
    c = r["choices"][0]
    assert c["finish_reason"] == "stop" and c["text"] == "" and c["matched_stop"] == 2, r
    r = eos_run(server, min_tokens=4)
    c = r["choices"][0]
    assert c["finish_reason"] == "stop" and c["matched_stop"] == 2, r
    assert r["usage"]["completion_tokens"] == 5  # 4 tokens, then the stop token
    # native: min_new_tokens; matched_stop in meta_info and in finish_reason
    st, r = server.post("/generate", {"text": "Count: 1, 2, 3,", "sampling_params": {
        "max_new_tokens": 12, "min_new_tokens": 3, "temperature": 0,
        "logit_bias": {"2": 100}}})
    assert st == 200, r
    m = r["meta_info"]
    assert m["completion_tokens"] == 4 and len(r["output_ids"]) == 3, r
    assert m["matched_stop"] == 2 and m["finish_reason"] == {"type": "stop", "matched": 2}
    # min above max: a 400 naming the field the client sent
    st, e = server.post("/generate", {"text": "a", "sampling_params": {
        "max_new_tokens": 2, "min_new_tokens": 3}})
    assert st == 400 and e["error"]["param"] == "sampling_params.min_new_tokens", e
    # a stop string: matched_stop is the string, in both APIs
    st, r = server.post("/generate", {"text": "Count: 1, 2, 3,", "sampling_params": {
        "max_new_tokens": 16, "temperature": 0, "stop": [" 5"]}})
    m = r["meta_info"]
    if m["finish_reason"]["type"] == "stop":
        assert m["matched_stop"] == m["finish_reason"]["matched"]
    st, r = server.post("/v1/completions", {"prompt": "Count: 1, 2, 3,", "max_tokens": 16,
                                            "temperature": 0, "stop": [","]})
    c = r["choices"][0]
    assert c["finish_reason"] == "stop" and c["matched_stop"] == ",", r
    # length: null
    r = eos_run(server, logit_bias={}, max_tokens=2, ignore_eos=True)
    assert r["choices"][0]["matched_stop"] is None


def test_stop_regex(server):
    """stop_regex ends the text where a match first ends; the match is not
    returned, matched_stop names the pattern; streaming never shows it."""
    base = {"text": "Count: 1, 2, 3, 4, 5, 6, 7, 8, 9,", "sampling_params": {
        "max_new_tokens": 24, "temperature": 0}}
    st, ref = server.post("/generate", base)
    assert st == 200, ref
    full = ref["text"]
    pat = r"1[0-9],"
    m = re.search(pat, full)
    assert m, full  # the model counts on; if not, the prompt needs changing
    body = json.loads(json.dumps(base))
    body["sampling_params"]["stop_regex"] = [pat]
    st, r = server.post("/generate", body)
    assert st == 200, r
    assert r["text"] == full[:m.start()], (r["text"], full)
    assert r["meta_info"]["matched_stop"] == pat
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": pat}
    body["stream"] = True
    events = sse_events(server, "/generate", body)
    texts = [e["text"] for e in events if isinstance(e, dict) and "text" in e]
    assert texts and texts[-1] == full[:m.start()]
    assert all(not re.search(pat, t) for t in texts)
    # OpenAI completions accept it too (an extension, as in SGLang)
    st, c = server.post("/v1/completions", {"prompt": base["text"], "max_tokens": 24,
                                            "temperature": 0, "stop_regex": pat})
    assert st == 200 and c["choices"][0]["text"] == full[:m.start()], c
    assert c["choices"][0]["finish_reason"] == "stop"
    # refusals name the field and say why
    for bad, says in [("[0-9", "stop_regex 0"), ("a*", "empty string"), ("(?=a)", "stop_regex 0")]:
        st, e = server.post("/generate", {"text": "a", "sampling_params": {
            "max_new_tokens": 2, "stop_regex": bad}})
        assert st == 400 and says in e["error"]["message"], e
    # what SGLang's frontend sends by default: null; "" and [] ask for nothing
    for nothing in [None, "", []]:
        st, r = server.post("/generate", {"text": "a", "sampling_params": {
            "max_new_tokens": 1, "stop_regex": nothing}})
        assert st == 200, r


def test_model_default_names_the_served_model(server):
    """SGLang's clients and docs send model "default"; another name is a 404."""
    for path, body in [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/completions", {"prompt": "hi"})]:
        st, r = server.post(path, dict(body, model="default", max_tokens=2))
        assert st == 200 and r["model"] != "default", r
        st, e = server.post(path, dict(body, model="defaults", max_tokens=2))
        assert st == 404 and e["error"]["code"] == "model_not_found", e


def test_abort_request(server):
    """SGLang's /abort_request: by rid, then every request at once; each
    aborted request answers with finish_reason type "abort"."""
    import concurrent.futures as cf

    def long_gen(rid):
        body = {"text": "Once upon a time", "rid": rid,
                "sampling_params": {"max_new_tokens": 1500, "ignore_eos": True}}
        return server.post("/generate", body, timeout=300)

    with cf.ThreadPoolExecutor(4) as ex:
        futs = {rid: ex.submit(long_gen, rid) for rid in ["r-a", "r-b", "r-c"]}
        time.sleep(1.0)
        st, r = server.post("/abort_request", {"rid": "r-a"})
        assert st == 200 and r["aborted"] == 1, r
        st, r = futs["r-a"].result(timeout=60)
        assert st == 200 and r["meta_info"]["finish_reason"]["type"] == "abort", r
        assert r["meta_info"]["id"] == "r-a" and r["meta_info"]["completion_tokens"] < 1500
        st, r = server.post("/abort_request", {"abort_all": True})
        assert st == 200 and r["aborted"] == 2, r
        for rid in ["r-b", "r-c"]:
            st, r = futs[rid].result(timeout=60)
            assert st == 200 and r["meta_info"]["finish_reason"]["type"] == "abort", r
    st, r = server.post("/abort_request", {"rid": "nobody"})
    assert st == 200 and r["aborted"] == 0, r
    for bad in [{}, {"rid": 3}, {"abort_all": "yes"}, {"abort_all": False}]:
        st, e = server.post("/abort_request", bad)
        assert st == 400 and "abort_all" in e["error"]["message"], (bad, e)
    server.wait_idle()


def test_concate_and_append_request(server):
    """SGLang's parallel encoding: the join is answered as done (the next
    /generate carries the joined text and is computed whole); a body of
    the wrong shape is a 400 that says what is expected."""
    st, r = server.post("/concate_and_append_request", {"src_rids": ["a", "b"], "dst_rid": "c"})
    assert st == 200 and r == {"success": True}, r
    for bad in [{"src_rids": "a", "dst_rid": "c"}, {"src_rids": ["a", 1], "dst_rid": "c"},
                {"src_rids": ["a"]}]:
        st, e = server.post("/concate_and_append_request", bad)
        assert st == 400 and "src_rids" in e["error"]["message"], e


@pytest.mark.parametrize("method,path", [
    ("POST", "/v1/embeddings"),
    ("GET", "/start_profile"), ("POST", "/v1/responses"), ("POST", "/encode"),
    ("POST", "/pause_generation"),
])
def test_unoffered_routes_answer_at_once(server, method, path):
    t = time.time()
    st, e = server.request(method, path, {"src_rids": ["a"], "dst_rid": "b"}, timeout=5)
    assert st == 501 and e["error"]["code"] == "not_implemented", e
    assert path in e["error"]["message"] and time.time() - t < 2


def test_unknown_routes_do_not_hang(server):
    for method in ("GET", "POST", "PUT", "DELETE"):
        t = time.time()
        st, e = server.request(method, "/no/such/route", {} if method != "GET" else None,
                               timeout=5)
        assert st == 404 and time.time() - t < 2, (method, st, e)


def test_stream_n2_role_chunks_and_finish(server):
    ev = sse_events(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Say hi"}], "n": 2, "max_tokens": 4,
        "stream": True, "seed": 1})
    roles = [e for e in ev if any("role" in c["delta"] for c in e["choices"])]
    assert len(roles) == 2 and all(len(e["choices"]) == 1 for e in roles)
    assert sorted(e["choices"][0]["index"] for e in roles) == [0, 1]
    finals = [c for e in ev for c in e["choices"] if c["finish_reason"]]
    assert sorted(c["index"] for c in finals) == [0, 1]
    assert all(c["delta"] == {} for c in finals)


def test_stream_completion_last_chunk(server):
    body = {"prompt": "The sky is", "max_tokens": 5, "temperature": 0, "logprobs": 2,
            "stream": True, "ignore_eos": True}
    ev = sse_events(server, "/v1/completions", body)
    chunks = [c for e in ev for c in e["choices"]]
    last = chunks[-1]
    assert last["finish_reason"] == "length"
    # the last chunk is a real piece: its text and its log-probabilities
    assert last["text"] != "" and last["logprobs"] is not None
    assert len(last["logprobs"]["tokens"]) >= 1
    assert all(c["logprobs"] is not None for c in chunks)
    st, whole = server.post("/v1/completions", dict(body, stream=False))
    assert "".join(c["text"] for c in chunks) == whole["choices"][0]["text"]
    n = sum(len(c["logprobs"]["tokens"]) for c in chunks)
    assert n == len(whole["choices"][0]["logprobs"]["tokens"]) == 5


def test_assistant_prefill(client, server):
    msgs = [{"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is"}]
    # continued (the default with a final assistant message): the turn is
    # open, so the prompt ends with the prefill text
    r = client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=msgs,
                                       max_tokens=1, temperature=0, logprobs=True)
    cont_prompt = r.usage.prompt_tokens
    # closed with a new turn (vLLM's default), asked explicitly
    r2 = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", messages=msgs, max_tokens=1, temperature=0,
        extra_body={"add_generation_prompt": True})
    # the closed form adds "<|im_end|>\n<|im_start|>assistant\n"
    assert r2.usage.prompt_tokens > cont_prompt
    r3 = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", messages=msgs, max_tokens=1, temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False})
    assert r3.usage.prompt_tokens == cont_prompt
    assert r3.choices[0].message.content == r.choices[0].message.content
    # continue_final_message with a user message last: a 400 naming it
    st, e = server.post("/v1/chat/completions", {"messages": msgs[:1],
                                                 "continue_final_message": True})
    assert st == 400 and e["error"]["param"] == "continue_final_message", e


def test_property_order_field(server):
    """property_order: "any" compiles the schema with keys in any order;
    a bad value is a 400 naming the field."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"], "additionalProperties": False}
    for order in ["schema", "any"]:
        st, r = server.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Give b then a as JSON."}], "max_tokens": 40,
            "temperature": 0, "property_order": order,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        assert st == 200, r
        ch = r["choices"][0]
        if ch["finish_reason"] == "stop":
            v = json.loads(ch["message"]["content"])
            assert sorted(v) == ["a", "b"], v
    st, e = server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "property_order": "random",
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert st == 400 and e["error"]["param"] == "property_order", e


# ---- prompt log-probabilities (issue 34) ----

def test_input_token_logprobs(server):
    """return_logprob + logprob_start_len: input_token_logprobs from that position, as
    SGLang returns them ([logprob, id, text-or-null], null logprob at position 0);
    input_top_logprobs with top_logprobs_num; they equal the output log-probs greedy
    generation gave the same tokens (teacher forcing)."""
    prompt = "The capital of France is"
    st, g = server.post("/generate", {"text": prompt, "return_logprob": True,
                                      "sampling_params": {"max_new_tokens": 6, "temperature": 0}})
    assert st == 200, g
    m = g["meta_info"]
    # SGLang's default logprob_start_len (-1): the last prompt token alone
    assert len(m["input_token_logprobs"]) == 1 and m["input_token_logprobs"][0][2] is None
    assert m["output_token_logprobs_length"] == len(m["output_token_logprobs"]) == 6
    n_prompt = m["prompt_tokens"]
    ids = server.post("/tokenize", {"prompt": prompt})[1]["tokens"]
    assert len(ids) == n_prompt
    full = ids + g["output_ids"]
    st, r = server.post("/generate", {"input_ids": full, "return_logprob": True,
                                      "logprob_start_len": 0, "top_logprobs_num": 2,
                                      "return_text_in_logprobs": True,
                                      "sampling_params": {"max_new_tokens": 0}})
    assert st == 200, r
    m2 = r["meta_info"]
    itl = m2["input_token_logprobs"]
    assert len(itl) == len(full) and [e[1] for e in itl] == full
    assert itl[0][0] is None and m2["input_top_logprobs"][0] is None
    assert all(isinstance(e[2], str) for e in itl)
    for k, (lp, tok, _) in enumerate(m["output_token_logprobs"]):
        assert abs(itl[n_prompt + k][0] - lp) < 2e-3, (k, itl[n_prompt + k], lp)
        assert m2["input_top_logprobs"][n_prompt + k][0][1] == tok  # greedy: the argmax
    assert all(len(t) == 2 for t in m2["input_top_logprobs"][1:])
    assert m2["output_token_logprobs"] == [] and m2["output_token_logprobs_length"] == 0
    # from a later position: the tail of the same numbers, cache or not
    st, r3 = server.post("/generate", {"input_ids": full, "return_logprob": True,
                                       "logprob_start_len": n_prompt,
                                       "sampling_params": {"max_new_tokens": 0}})
    tail = r3["meta_info"]["input_token_logprobs"]
    assert [e[1] for e in tail] == full[n_prompt:] and all(e[2] is None for e in tail)
    assert all(abs(a[0] - b[0]) < 1e-5 for a, b in zip(tail, itl[n_prompt:]))
    # a start past the prompt is refused with the reason
    st, e = server.post("/generate", {"input_ids": full, "return_logprob": True,
                                      "logprob_start_len": len(full),
                                      "sampling_params": {"max_new_tokens": 0}})
    assert st == 400 and "prompt_logprobs_start" in e["error"]["message"], e
    server.wait_idle()


def test_stream_output_token_logprobs(server):
    """Streamed /generate: each chunk has the text so far but only its new output log-probs
    (what SGLang's frontend and its test_stream_logprobs expect), with
    output_token_logprobs_length the total so far; input_token_logprobs in every chunk. The
    chunks' entries joined equal the unstreamed answer's."""
    body = {"text": "One, two, three,", "return_logprob": True, "logprob_start_len": 1,
            "sampling_params": {"max_new_tokens": 5, "temperature": 0}}
    ev = sse_events(server, "/generate", dict(body, stream=True))
    assert len(ev) >= 2
    n_prompt = ev[-1]["meta_info"]["prompt_tokens"]
    joined, prev_len = [], 0
    for e in ev:
        m = e["meta_info"]
        assert len(m["input_token_logprobs"]) == n_prompt - 1
        assert m["output_token_logprobs_length"] == m["completion_tokens"] == len(e["output_ids"])
        assert len(m["output_token_logprobs"]) == m["output_token_logprobs_length"] - prev_len
        prev_len = m["output_token_logprobs_length"]
        joined += m["output_token_logprobs"]
    assert prev_len == 5 and [x[1] for x in joined] == ev[-1]["output_ids"]
    st, whole = server.post("/generate", body)
    assert st == 200 and whole["meta_info"]["output_token_logprobs_length"] == 5
    assert [x[1] for x in whole["meta_info"]["output_token_logprobs"]] == [x[1] for x in joined]
    assert all(abs(a[0] - b[0]) < 1e-5
               for a, b in zip(whole["meta_info"]["output_token_logprobs"], joined))
