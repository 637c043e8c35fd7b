"""LangChain's OpenAI chat model (`langchain-openai`, PyPI) against trellis serve, as its
users call it: invoke, stream, structured output by function calling and by json_schema
(both grammar-enforced: the 135M model's answer always parses), and tools bound with a
named tool_choice and with auto."""
from typing import Literal

import langchain_openai
import pydantic
import pytest
from langchain_core.tools import tool

MODEL = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture(scope="module")
def llm(server):
    return langchain_openai.ChatOpenAI(base_url=server.base + "/v1", api_key="unused",
                                       model=MODEL, temperature=0, max_tokens=60,
                                       max_retries=0)


def test_invoke_and_stream(llm):
    whole = llm.invoke("Say hello.")
    assert isinstance(whole.content, str) and whole.content
    assert whole.response_metadata["finish_reason"] in ("stop", "length")
    text = "".join(c.content for c in llm.stream("Say hello."))
    assert text == whole.content


class User(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=30)
    age: int = pydantic.Field(ge=0, le=130)
    role: Literal["admin", "user"]


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_structured_output(llm, method):
    u = llm.with_structured_output(User, method=method).invoke(
        "Jason is a 25 year old admin.")
    assert isinstance(u, User)


@tool
def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
    """The current weather in a city."""
    return "sunny"


def test_bound_tools(llm):
    r = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
    assert r.response_metadata["finish_reason"] == "tool_calls"
    assert [c["name"] for c in r.tool_calls] == ["get_weather"]
    get_weather.args_schema.model_validate(r.tool_calls[0]["args"])
    r = llm.bind_tools([get_weather]).invoke("Weather in Paris?")  # auto: text or calls
    assert r.content or r.tool_calls
    assert not r.invalid_tool_calls
