"""Tool calling through the official `openai` client (issue 34): every shape OpenAI has
(required, named, auto with text, parallel and not, streamed and not, history with tool
results, response_format beside tools, pydantic tools through `parse()`). Every call's
arguments are checked with `jsonschema` against its function's parameters, at temperature
0 and 1: the grammar makes them valid whatever the 135M model would write."""
import json

import jsonschema
import openai
import pydantic
import pytest

MODEL = "SmolLM2-135M-Instruct.Q4_1"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a time zone",
    "parameters": {"$defs": {"zone": {"type": "string", "pattern": "^[A-Z][a-z]{1,12}/[A-Z][a-z]{1,12}$"}},
                   "type": "object", "properties": {"zone": {"$ref": "#/$defs/zone"},
                                                    "hours24": {"type": "boolean"}},
                   "required": ["zone"]}}}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What is the weather in Paris, and the time in Tokyo?"}]


def params_of(name):
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


def check_calls(msg, finish):
    """Every reported call is complete and valid; returns the calls."""
    calls = msg.tool_calls or []
    for c in calls:
        assert c.type == "function" and c.id
        jsonschema.validate(json.loads(c.function.arguments), params_of(c.function.name))
    assert len({c.id for c in calls}) == len(calls)
    if finish == "tool_calls":
        assert calls
    return calls


@pytest.mark.parametrize("temperature", [0, 1])
def test_required(client, temperature):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS,
                                       tool_choice="required", max_tokens=120, n=3,
                                       temperature=temperature, seed=5)
    for ch in r.choices:
        calls = check_calls(ch.message, ch.finish_reason)
        assert calls, ch
        assert ch.finish_reason in ("tool_calls", "length")
        assert ch.message.content is None


def test_named_and_not_parallel(client):
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, temperature=1, seed=3, n=4, max_tokens=120,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    for ch in r.choices:  # one call of that function (or cut short: none reported)
        calls = check_calls(ch.message, ch.finish_reason)
        assert [c.function.name for c in calls] == (
            ["get_time"] if ch.finish_reason == "tool_calls" else []), ch
    assert any(ch.finish_reason == "tool_calls" for ch in r.choices)
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, n=4, seed=9,
                                       tool_choice="required", parallel_tool_calls=False,
                                       temperature=1, max_tokens=120)
    for ch in r.choices:
        assert len(check_calls(ch.message, ch.finish_reason)) == 1, ch


@pytest.mark.parametrize("temperature", [0, 1])
def test_auto(client, temperature):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, n=4, seed=1,
                                       temperature=temperature, max_tokens=100)
    for ch in r.choices:
        calls = check_calls(ch.message, ch.finish_reason)
        if not calls:
            assert isinstance(ch.message.content, str)
            assert "<tool_call>" not in ch.message.content


def collect_stream(stream):
    content, calls, finish, roles = "", {}, None, 0
    for chunk in stream:
        for ch in chunk.choices:
            d = ch.delta
            roles += d.role == "assistant"
            content += d.content or ""
            for tc in d.tool_calls or []:
                if tc.id:  # a call starts: id, type and name first
                    assert tc.index not in calls and tc.function.name
                    calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
                calls[tc.index]["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    assert roles == 1
    return content, [calls[k] for k in sorted(calls)], finish


def test_stream_equals_whole(client):
    kw = dict(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0,
              max_tokens=120)
    whole = client.chat.completions.create(**kw).choices[0]
    content, calls, finish = collect_stream(client.chat.completions.create(stream=True, **kw))
    assert finish == whole.finish_reason
    wc = whole.message.tool_calls
    # a call cut short by max_tokens streams its start but is not in the whole answer
    n = len(wc)
    assert [(c["name"], c["arguments"]) for c in calls[:n]] == \
        [(c.function.name, c.function.arguments) for c in wc]
    for c in calls[:n]:
        jsonschema.validate(json.loads(c["arguments"]), params_of(c["name"]))


def test_history_with_tool_results(client):
    first = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS,
                                           tool_choice="required", parallel_tool_calls=False,
                                           temperature=0, max_tokens=80).choices[0].message
    assert first.tool_calls
    messages = ASK + [first.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": json.dumps({"result": "sunny, 21"})}
        for c in first.tool_calls]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS,
                                       tool_choice="none", temperature=0, max_tokens=30)
    ch = r.choices[0]
    assert ch.message.tool_calls is None and isinstance(ch.message.content, str)
    assert ch.finish_reason in ("stop", "length")
    # the history is longer than the question alone: the calls and results were rendered
    alone = client.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=1)
    assert r.usage.prompt_tokens > alone.usage.prompt_tokens + 20


def test_response_format_beside_tools(client):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 30}},
              "required": ["answer"], "additionalProperties": False}
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, n=4, temperature=1, seed=2, max_tokens=120,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    for ch in r.choices:
        calls = check_calls(ch.message, ch.finish_reason)
        if not calls and ch.finish_reason == "stop":
            jsonschema.validate(json.loads(ch.message.content), schema)


class Lookup(pydantic.BaseModel):
    city: str
    days: int


def test_pydantic_tool_parse(client):
    r = client.chat.completions.parse(model=MODEL, messages=ASK, temperature=0, max_tokens=80,
                                      tools=[openai.pydantic_function_tool(Lookup)],
                                      tool_choice="required", parallel_tool_calls=False)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    args = ch.message.tool_calls[0].function.parsed_arguments
    assert isinstance(args, Lookup) and isinstance(args.days, int)


def _strict_keys(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"repeated key in {keys}"
    return dict(pairs)


def test_no_repeated_keys_in_arguments(client):
    """A tool whose parameters leave the keys free (patternProperties,
    additionalProperties) never gets a key twice in its arguments, nor in
    the call's own object: many sampled calls, each parsed by a parser
    that refuses repeats (issue 33; the tracker of JSON Schema outputs,
    started after each <tool_call> tag). Key sets without end: with a
    few possible keys (^[ab]{1,2}$), a model that starts a key whose every
    completion is taken ("bb" written, then "b) still meets an empty mask
    and the request fails (the stated limit, grammar/README.md)."""
    tally = {"type": "function", "function": {
        "name": "tally", "description": "Counts of the letters a and b",
        "parameters": {"type": "object",
                       "patternProperties": {"^[ab]+$": {"type": "integer"}},
                       "additionalProperties": False}}}
    free = {"type": "function", "function": {
        "name": "record", "description": "Any named counts",
        "parameters": {"type": "object", "additionalProperties": {"type": "integer"}}}}
    ask = [{"role": "user", "content": "Count the letters a and b, and a and b again."}]
    finished = 0
    for tool in (tally, free):
        for seed in range(4):
            r = client.chat.completions.create(
                model=MODEL, messages=ask, tools=[tool], tool_choice="required",
                max_tokens=120, n=8, temperature=1.0, seed=seed)
            for ch in r.choices:
                for c in ch.message.tool_calls or []:
                    json.loads(c.function.arguments, object_pairs_hook=_strict_keys)
                    finished += 1
    assert finished >= 10, finished
