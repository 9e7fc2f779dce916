"""Tools for multi-turn episodes (coevo/rollout/tools.py): schemas, loading, the call format, and
running calls, with a TRL-docs-style function and a small stateful environment defined here."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from transformers.utils import get_json_schema

from coevo.errors import InputError
from coevo.rollout.tools import (
    CALL_OPEN,
    ToolCall,
    ToolResult,
    argument_errors,
    environment_tools,
    format_tool_call,
    load_tools,
    new_environment,
    parse_tool_call,
    render_tools,
    reset_environment,
    result_text,
    run_tool,
    template_takes_tools,
    tool_spec,
    tools_for_template,
)

HERE = "tests.rollout.test_tools"
SMOLLM2 = Path(__file__).resolve().parents[2] / "models" / "smollm2-135m-instruct"
RELEASE = threading.Event()  # set at the end of a hang test so its abandoned thread returns


def multiply(a: float, b: float) -> float:
    """
    Multiply two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a * b


def repeat(word: str, times: int = 2, sep: str | None = None) -> str:
    """
    Repeat a word.

    Args:
        word: The word.
        times: How many times.
        sep: What goes between them.
    """
    return (sep or "").join([word] * times)


def divide(a: float, b: float) -> float:
    """
    Divide a by b.

    Args:
        a: The dividend.
        b: The divisor.
    """
    return a / b


def stall(seconds: float) -> str:
    """
    Wait, then answer.

    Args:
        seconds: How long to wait at most.
    """
    RELEASE.wait(seconds)
    return "late"


def no_docstring(a: int) -> int:
    return a


def undocumented_argument(a: int, b: int) -> int:
    """
    Add.

    Args:
        a: The first.
    """
    return a + b


def no_type_hint(a) -> int:
    """
    Identity.

    Args:
        a: The value.
    """
    return a


def variadic(*values: int) -> int:
    """
    Sum.

    Args:
        values: The values.
    """
    return sum(values)


class Counter:
    """A stateful environment in the shape TRL's environment_factory takes."""

    def __init__(self):
        self.count = 0
        self.label = "counter"  # an attribute, not a tool

    def reset(self, start: int = 0, **row) -> str | None:
        if not isinstance(start, int):
            raise TypeError(f"start must be an integer, got {start!r}")
        self.count = start
        return f"The counter is at {start}." if row.get("announce") else None

    def increment(self, by: int) -> int:
        """
        Add to the counter.

        Args:
            by: How much to add.
        """
        self.count += by
        return self.count

    def read(self) -> dict:
        """
        The counter's state.
        """
        return {"count": self.count}

    def stall(self, seconds: float) -> str:
        """
        Hang.

        Args:
            seconds: How long to wait at most.
        """
        RELEASE.wait(seconds)
        return "late"

    def _private(self) -> None:
        pass


class Point:
    def __repr__(self) -> str:
        return "Point(1, 2)"


class NoReset:
    def act(self, x: int) -> int:
        """
        Act.

        Args:
            x: A number.
        """
        return x


class OnlyReset:
    def reset(self, **row) -> None:
        return None


class BadReset:
    def reset(self, **row) -> int:
        return 3

    def act(self, x: int) -> int:
        """
        Act.

        Args:
            x: A number.
        """
        return x


def test_a_documented_function_has_get_json_schemas_schema():
    (spec,) = load_tools([f"{HERE}:multiply"])
    expected = get_json_schema(multiply)
    assert spec.name == "multiply" and spec.function is multiply
    assert spec.description == expected["function"]["description"] == "Multiply two numbers."
    assert spec.parameters == expected["function"]["parameters"]
    assert spec.parameters["properties"]["a"] == {"type": "number", "description": "The first number."}
    assert spec.parameters["required"] == ["a", "b"]
    assert tools_for_template([spec]) == [expected]
    assert tool_spec(repeat).parameters["required"] == ["word"]


@pytest.mark.parametrize(
    ("function", "missing"),
    [
        (no_docstring, "no docstring"),
        (undocumented_argument, "no description for the argument 'b'"),
        (no_type_hint, "missing a type hint"),
        (variadic, "*values"),
    ],
)
def test_a_function_get_json_schema_rejects_is_an_input_error_naming_it(function, missing):
    with pytest.raises(InputError, match=function.__name__) as caught:
        tool_spec(function)
    assert missing in str(caught.value)
    with pytest.raises(InputError, match=rf"tools\[1\] '{HERE}:{function.__name__}'"):
        load_tools([f"{HERE}:multiply", f"{HERE}:{function.__name__}"])


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("multiply", "name it as 'module:function'"),
        (f"{HERE}:", "name it as 'module:function'"),
        ("no_such_module_for_tools:f", "cannot import module 'no_such_module_for_tools'"),
        (f"{HERE}:absent", "has no attribute 'absent'"),
        (f"{HERE}:HERE", "is not callable"),
    ],
)
def test_a_tools_entry_that_cannot_load_names_the_entry(path, says):
    with pytest.raises(InputError, match=r"tools\[0\]") as caught:
        load_tools([path])
    assert says in str(caught.value)


def test_two_tools_of_one_name_are_an_error():
    with pytest.raises(InputError, match="two tools are named 'multiply'"):
        load_tools([f"{HERE}:multiply", f"{HERE}:multiply"])


def test_an_environments_public_methods_are_tools_bound_to_it():
    env = new_environment(f"{HERE}:Counter")
    assert isinstance(env, Counter)
    assert reset_environment(env, {"start": 5, "announce": True, "answer": "7"}) == "The counter is at 5."
    specs = environment_tools(env)
    assert [s.name for s in specs] == ["increment", "read", "stall"]  # not reset, _private, nor the attribute
    assert specs[0].parameters == get_json_schema(Counter.increment)["function"]["parameters"]
    assert run_tool(ToolCall("increment", {"by": 2}), specs, 5) == ToolResult("7")
    assert run_tool(ToolCall("read", {}), specs, 5).content == '{"count": 7}'
    other = new_environment(f"{HERE}:Counter")  # one instance per episode: state is not shared
    assert reset_environment(other, {"id": "p1"}) is None
    assert run_tool(ToolCall("read", {}), environment_tools(other), 5).content == '{"count": 0}'


def test_reset_gets_only_the_columns_its_signature_takes():
    class Strict:
        def reset(self, prompt: str) -> str:
            return prompt.upper()

    assert reset_environment(Strict(), {"prompt": "go", "answer": "x", "id": "p"}) == "GO"


@pytest.mark.parametrize(
    ("factory", "says"),
    [
        ("NoReset", "environment class tests.rollout.test_tools.NoReset has no reset method"),
        ("OnlyReset", "OnlyReset has no public methods besides reset"),
        ("Missing", "has no attribute 'Missing'"),
    ],
)
def test_a_bad_environment_class_is_an_error_naming_it(factory, says):
    with pytest.raises(InputError) as caught:
        environment_tools(new_environment(f"{HERE}:{factory}"))
    assert says in str(caught.value)
    if factory == "NoReset":
        with pytest.raises(InputError, match="NoReset has no reset method"):
            environment_tools(NoReset())


def test_reset_returning_neither_a_string_nor_none_or_raising_is_an_error():
    with pytest.raises(InputError, match="BadReset.reset returned a int"):
        reset_environment(BadReset(), {})
    with pytest.raises(InputError, match=r"Counter.reset raised TypeError: .* \(row 'p1'\)"):
        reset_environment(Counter(), {"id": "p1", "start": "zero"})


def test_a_rendered_call_parses_back_and_render_tools_documents_the_format():
    specs = load_tools([f"{HERE}:multiply", f"{HERE}:repeat"])
    text = f"Let me compute.\n{format_tool_call('multiply', {'a': 3, 'b': 4.5})}"
    assert parse_tool_call(text) == ToolCall("multiply", {"a": 3, "b": 4.5})
    assert run_tool(parse_tool_call(text), specs, 5).content == "13.5"
    system = render_tools(specs)
    for spec in specs:
        assert json.dumps(spec.schema(), ensure_ascii=False) in system
    example = system[system.index(CALL_OPEN) :].split("\n")[0]
    assert parse_tool_call(example) == ToolCall("<tool name>", {"<argument>": "<value>"})
    assert "Only the first call" in system


def test_parse_reports_bad_calls_as_calls_carrying_an_error():
    assert parse_tool_call("The answer is 42.") is None
    assert parse_tool_call('<tool_call>{"name": "multiply", "arguments": {"a": 1, }</tool_call>').error.startswith(
        "malformed JSON"
    )
    assert 'no "name"' in parse_tool_call('<tool_call>{"arguments": {}}</tool_call>').error
    assert 'no "name"' in parse_tool_call('<tool_call>{"name": 3, "arguments": {}}</tool_call>').error
    bad_args = parse_tool_call('<tool_call>{"name": "multiply", "arguments": [1, 2]}</tool_call>')
    assert bad_args.name == "multiply" and "must be a JSON object, got list" in bad_args.error
    assert "JSON object" in parse_tool_call("<tool_call>[1]</tool_call>").error
    result = run_tool(bad_args, load_tools([f"{HERE}:multiply"]), 5)
    assert result.error and "must be a JSON object" in result.content


def test_only_the_first_call_of_a_turn_counts_and_a_missing_close_tag_is_tolerated():
    two = format_tool_call("multiply", {"a": 1, "b": 2}) + "\n" + format_tool_call("divide", {"a": 1, "b": 2})
    assert parse_tool_call(two) == ToolCall("multiply", {"a": 1, "b": 2}, later_calls=1)
    assert parse_tool_call('<tool_call>\n{"name": "read", "arguments": {}}\n') == ToolCall("read", {})
    assert parse_tool_call('<tool_call>{"name": "read"}</tool_call>') == ToolCall("read", {})


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (ToolCall("add", {"a": 1}), "unknown tool 'add'; the tools are divide, multiply, repeat"),
        (ToolCall("multiply", {"a": 1}), "missing argument 'b'"),
        (ToolCall("multiply", {"a": 1, "b": 2, "c": 3}), "unexpected argument 'c'"),
        (ToolCall("multiply", {"a": "1", "b": 2}), "argument 'a' must be number, got str"),
        (ToolCall("repeat", {"word": "x", "times": True}), "argument 'times' must be integer, got bool"),
        (ToolCall("repeat", {"word": "x", "times": 1.5}), "argument 'times' must be integer"),
        (ToolCall("repeat", {"word": ["x"]}), "argument 'word' must be string, got list"),
        (ToolCall("divide", {"a": 1, "b": 0}), "divide raised ZeroDivisionError: division by zero"),
    ],
)
def test_a_failing_call_is_an_error_result(call, says):
    result = run_tool(call, load_tools([f"{HERE}:multiply", f"{HERE}:repeat", f"{HERE}:divide"]), 5)
    assert result.error and not result.end_episode
    assert says in result.content


def test_arguments_are_checked_against_the_schema_types():
    spec = tool_spec(repeat)
    assert argument_errors(spec, {"word": "x", "times": 3, "sep": None}) == []
    assert argument_errors(spec, {"word": "x", "sep": 1}) == ["argument 'sep' must be string, got int 1"]
    assert run_tool(ToolCall("repeat", {"word": "ab", "times": 2.0, "sep": "-"}), [spec], 5).content == "ab-ab"


def test_a_hanging_tool_is_an_error_result_after_the_timeout():
    RELEASE.clear()
    try:
        result = run_tool(ToolCall("stall", {"seconds": 30}), [tool_spec(stall)], 0.5)
        assert result.error and not result.end_episode
        assert result.content == "error: stall timed out after 0.5 s"
    finally:
        RELEASE.set()


def test_a_hanging_environment_call_ends_the_episode():
    env = Counter()
    specs = environment_tools(env)
    RELEASE.clear()
    try:
        result = run_tool(ToolCall("stall", {"seconds": 30}), specs, 0.5)
        assert result.error and result.end_episode and "timed out" in result.content
        later = run_tool(ToolCall("read", {}), specs, 5)
        assert later.error and later.end_episode and "timed out on an earlier call" in later.content
    finally:
        RELEASE.set()
    assert not run_tool(ToolCall("read", {}), environment_tools(Counter()), 5).error  # a new episode's instance


def test_return_values_become_text():
    assert result_text(None) == ""
    assert result_text("plain") == "plain"
    assert result_text({"a": [1, 2.5, None], "é": True}) == '{"a": [1, 2.5, null], "é": true}'
    assert result_text((1, 2)) == "[1, 2]"
    assert result_text(3) == "3" and result_text(True) == "true"
    assert result_text({"at": Point()}) == "{'at': Point(1, 2)}"  # not JSON: str()
    assert result_text(Point()) == "Point(1, 2)"


@pytest.mark.skipif(not SMOLLM2.is_dir(), reason="models/smollm2-135m-instruct is not present locally")
def test_smollm2s_chat_template_ignores_tools_so_the_fallback_format_is_used():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(SMOLLM2), local_files_only=True)
    turns = [{"role": "user", "content": "What is 3 times 4?"}]
    schemas = tools_for_template(load_tools([f"{HERE}:multiply"]))
    plain = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    assert tokenizer.apply_chat_template(turns, tools=schemas, tokenize=False, add_generation_prompt=True) == plain
    assert not template_takes_tools(tokenizer)
    tokenizer.chat_template = (  # a template with a tool format (as Qwen's has) does render them
        "{% if tools %}{% for t in tools %}{{ t.function.name }}\n{% endfor %}{% endif %}"
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    )
    assert template_takes_tools(tokenizer)
    assert tokenizer.apply_chat_template(turns, tools=schemas, tokenize=False).startswith("multiply\n")
