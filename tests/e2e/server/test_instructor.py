"""`instructor` (PyPI) against trellis serve, as its users call it: a pydantic model as
`response_model`, through the official openai client, in its TOOLS, PARALLEL_TOOLS,
JSON_SCHEMA, JSON and MD_JSON modes. TOOLS, PARALLEL_TOOLS and JSON_SCHEMA are enforced
by the server's grammar (named tool call, tool calls, json_schema), so the small model's
answer always parses into the model; JSON only asks for some JSON object and MD_JSON for
nothing at all (the schema is in the prompt), so there the test checks that instructor
gets its answer through, and what a parse failure says."""
from typing import Iterable, Literal

import instructor
import openai
from instructor.core import IncompleteOutputException, InstructorRetryException
import pydantic
import pytest

MODEL = "SmolLM2-135M-Instruct.Q4_1"


class User(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=30)
    age: int = pydantic.Field(ge=0, le=130)
    role: Literal["admin", "user"]


ASK = [{"role": "user", "content": "Extract: Jason is a 25 year old admin."}]


def make(server, mode):
    return instructor.from_openai(
        openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0), mode=mode)


@pytest.mark.parametrize("mode", [instructor.Mode.TOOLS, instructor.Mode.TOOLS_STRICT,
                                  instructor.Mode.JSON_SCHEMA])
@pytest.mark.parametrize("temperature", [0, 1])
def test_enforced_modes_always_parse(server, mode, temperature):
    c = make(server, mode)
    for seed in range(3):
        u, raw = c.chat.completions.create_with_completion(
            model=MODEL, response_model=User, messages=ASK, max_tokens=120, max_retries=0,
            temperature=temperature, seed=seed)
        assert isinstance(u, User) and 0 <= u.age <= 130 and len(u.name) <= 30
        assert raw.choices[0].finish_reason in ("tool_calls", "stop")


def test_parallel_tools(server):
    """PARALLEL_TOOLS: every call is one of the models, valid. The 135M model goes on
    writing calls until max_tokens when more are allowed; instructor then reports the
    output incomplete, and every call the server did report still validates."""

    class Weather(pydantic.BaseModel):
        city: str = pydantic.Field(max_length=20)

    class Clock(pydantic.BaseModel):
        zone: Literal["UTC", "CET", "JST"]

    c = make(server, instructor.Mode.PARALLEL_TOOLS)
    raw_client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
    kw = dict(model=MODEL, max_tokens=150, temperature=0,
              messages=[{"role": "user", "content": "Weather in Paris? Time in Tokyo?"}])
    try:
        items = list(c.chat.completions.create(response_model=Iterable[Weather | Clock],
                                               max_retries=0, **kw))
        assert items and all(isinstance(x, (Weather, Clock)) for x in items)
    except IncompleteOutputException:
        tools = [openai.pydantic_function_tool(Weather), openai.pydantic_function_tool(Clock)]
        r = raw_client.chat.completions.create(tools=tools, tool_choice="required", **kw)
        ch = r.choices[0]
        assert ch.finish_reason == "length" and ch.message.tool_calls
        for call in ch.message.tool_calls:
            {"Weather": Weather, "Clock": Clock}[call.function.name].model_validate_json(
                call.function.arguments)


@pytest.mark.parametrize("mode", [instructor.Mode.JSON, instructor.Mode.MD_JSON])
def test_prompted_modes(server, mode):
    """Not enforced: the answer parses, or instructor reports the validation failure (the
    135M model's JSON), never a transport or protocol error."""
    c = make(server, mode)
    try:
        u = c.chat.completions.create(model=MODEL, response_model=User, messages=ASK,
                                      max_tokens=120, max_retries=0, temperature=0)
        assert isinstance(u, User)
    except IncompleteOutputException:
        pass  # the model's prose ran past max_tokens (MD_JSON asks for nothing)
    except InstructorRetryException as e:
        assert isinstance(e.__cause__ or e, (pydantic.ValidationError,
                                            InstructorRetryException)), e
        assert e.last_completion is not None and e.last_completion.choices
