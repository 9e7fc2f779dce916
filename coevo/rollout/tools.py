"""Tools for multi-turn episodes (issue 42): user functions and environments the model calls.

A building block: nothing in `coevo train` calls it yet. The episode rollout (a later change) will
generate an assistant turn, `parse_tool_call` it, `run_tool` the call and append the result as a
tool turn, until the model answers without a call, `max_turns`, or a token budget.

Source: TRL's `GRPOTrainer(tools=..., environment_factory=...)` contract. A tool is a stateless
function with type hints and a Google-style docstring (`tools: ["module:function", ...]`, imported as
reward plugins are, `coevo.plugins.load_plugin`); an environment is a class (`environment:
{factory: "module:Class"}`) made once per episode, whose `reset(**row)` gets the dataset row's columns
and may return an initial observation, and whose public methods (type hints, Google docstrings)
become tools bound to that instance. Schemas come from `transformers.utils.get_json_schema`, the
shape `apply_chat_template(..., tools=...)` takes. The call format is Hermes/Qwen's:
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the assistant's text.

SmolLM2-135M-Instruct (models/smollm2-135m-instruct, transformers 5.19): its chat template never
reads `tools`; `apply_chat_template(..., tools=[...])` neither fails nor changes the prompt (the
same text as without). `template_takes_tools` detects this, so for SmolLM2 the fallback is used:
`render_tools(specs)` as (part of) the system turn.

Departures from TRL:
1. One call format for every model: a template without a tool format gets `render_tools`' system
   text, which documents `<tool_call>` (TRL leaves that to the template).
2. Only the first `<tool_call>` of a turn runs (`ToolCall.later_calls` counts the rest); the model
   sees that result and may call again next turn.
3. Every failure is a `ToolResult(error=True)` the episode records as the tool turn, never a crash:
   malformed JSON, a missing name, non-object arguments, an unknown tool (the result lists the
   known names), missing, extra or wrongly typed arguments (checked against the signature and the
   simple JSON-schema types), an exception (its type and message), a timeout.
4. A tool runs in a daemon worker thread and is waited for `timeout_s` seconds; a hung thread is
   abandoned, not killed (Python cannot stop a thread): it may keep running until it returns or the
   process exits. An environment whose call timed out may be mid-mutation, so it is marked:
   `ToolResult.end_episode` is set and every later call to its tools is refused.
5. Returns become text: a str as is, None as "", a dict, list, tuple, int, float or bool as
   `json.dumps` (`str()` if that fails), anything else `str()`.
6. `reset` gets only the row columns its signature takes (all of them with `**kwargs`), and must
   return a string or None.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coevo.errors import InputError
from coevo.plugins import load_plugin

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass
class EnvironmentState:
    """One environment instance as its tools share it; `timed_out` once a call to it hung."""

    instance: object
    timed_out: bool = False


@dataclass(frozen=True)
class ToolSpec:
    """A tool: its name, description, the JSON schema of its parameters, and the callable."""

    name: str
    description: str
    parameters: dict
    function: Callable
    returns: dict | None = None  # get_json_schema's "return" entry, when the function has a return hint
    environment: EnvironmentState | None = field(default=None, compare=False)

    def schema(self) -> dict:
        """The tool as `apply_chat_template(..., tools=...)` takes it (get_json_schema's shape)."""
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": function | ({"return": self.returns} if self.returns else {})}


@dataclass(frozen=True)
class ToolCall:
    """The first `<tool_call>` of an assistant turn; `error` says why it cannot run (then name may be None)."""

    name: str | None
    arguments: dict
    error: str | None = None
    later_calls: int = 0  # further <tool_call> blocks in the same turn, not run


@dataclass(frozen=True)
class ToolResult:
    """What the tool turn holds; `error` when the call failed, `end_episode` when its environment timed out."""

    content: str
    error: bool = False
    end_episode: bool = False


def _where(function: Callable) -> str:
    if inspect.ismethod(function):
        return f"{type(function.__self__).__name__}.{function.__name__}"
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", repr(function))
    return f"{getattr(function, '__module__', None)}:{name}"


def tool_spec(function: Callable, environment: EnvironmentState | None = None) -> ToolSpec:
    """A function's (or bound method's) ToolSpec; InputError naming it and what is missing when
    get_json_schema cannot describe it (no docstring, an undocumented argument, no type hint)."""
    from transformers.utils import get_json_schema

    where = _where(function)
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError) as exc:
        raise InputError(f"tool {where}: its signature cannot be read ({exc}); a tool is a Python function") from exc
    variadic = [
        ("*" if p.kind is p.VAR_POSITIONAL else "**") + p.name
        for p in parameters
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if variadic:
        raise InputError(f"tool {where}: {variadic[0]} cannot be a tool argument; name every argument")
    try:
        schema = get_json_schema(function)["function"]
    except Exception as exc:
        raise InputError(
            f"tool {where}: {str(exc).rstrip('!')}; a tool needs a type hint on every argument and a "
            "Google-style docstring (a description, then an Args: section documenting each argument)"
        ) from exc
    return ToolSpec(
        name=schema["name"],
        description=schema.get("description") or "",
        parameters=schema["parameters"],
        function=function,
        returns=schema.get("return"),
        environment=environment,
    )


def _load(path: str, what: str) -> Callable:
    if path.count(":") != 1 or not all(path.split(":")):
        raise InputError(f"{what} {path!r}: name it as 'module:function' (or 'module:Class')")
    try:
        return load_plugin(path)[0]
    except InputError as exc:
        raise InputError(f"{what} {path!r}: {exc}") from exc


def load_tools(paths: Sequence[str]) -> list[ToolSpec]:
    """The ToolSpecs of `tools:` entries ("module:function", imported as reward plugins are)."""
    specs = []
    for i, path in enumerate(paths):
        function = _load(path, f"tools[{i}]")
        try:
            specs.append(tool_spec(function))
        except InputError as exc:
            raise InputError(f"tools[{i}] {path!r}: {exc}") from exc
    tool_table(specs)
    return specs


def _check_reset(cls: type) -> None:
    if not callable(getattr(cls, "reset", None)):
        raise InputError(
            f"environment class {cls.__module__}.{cls.__qualname__} has no reset method; an environment "
            "needs reset(self, **row) (it may return an initial observation string, or None)"
        )


def new_environment(factory_path: str) -> object:
    """A fresh environment from `environment.factory` ("module:Class", called with no arguments)."""
    factory = _load(factory_path, "environment.factory")
    if inspect.isclass(factory):
        _check_reset(factory)
    try:
        instance = factory()
    except Exception as exc:
        raise InputError(f"environment.factory {factory_path!r}() raised {type(exc).__name__}: {exc}") from exc
    _check_reset(type(instance))
    return instance


def environment_tools(instance: object) -> list[ToolSpec]:
    """The tools of one environment instance: its public methods except `reset`, bound to it, in
    definition order (base classes first); InputError when it has no reset or no such method."""
    cls = type(instance)
    _check_reset(cls)
    names = dict.fromkeys(
        name for klass in reversed(cls.__mro__[:-1]) for name in vars(klass) if not name.startswith("_")
    )
    state = EnvironmentState(instance)
    specs = [
        tool_spec(getattr(instance, name), state)
        for name in names
        if name != "reset" and inspect.isfunction(inspect.getattr_static(instance, name))
    ]
    if not specs:
        raise InputError(
            f"environment class {cls.__module__}.{cls.__qualname__} has no public methods besides reset; "
            "its public methods (type hints, Google docstrings) are the model's tools"
        )
    return specs


def reset_environment(instance: object, row: Mapping[str, Any]) -> str | None:
    """Call `reset` with the row's columns its signature takes; its initial observation (or None).
    A reset that raises, or returns neither a string nor None, is an InputError naming the class."""
    cls = type(instance)
    _check_reset(cls)
    parameters = inspect.signature(instance.reset).parameters.values()
    takes_all = any(p.kind is p.VAR_KEYWORD for p in parameters)
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    try:
        observation = instance.reset(**{k: v for k, v in row.items() if takes_all or k in named})
    except Exception as exc:
        raise InputError(
            f"{cls.__qualname__}.reset raised {type(exc).__name__}: {exc} (row {row.get('id', '?')!r})"
        ) from exc
    if observation is not None and not isinstance(observation, str):
        raise InputError(
            f"{cls.__qualname__}.reset returned a {type(observation).__name__}; it must return a string "
            "(the initial observation) or None"
        )
    return observation


def tool_table(specs: Sequence[ToolSpec]) -> dict[str, ToolSpec]:
    """The tools by name; InputError when two share one (a function and an environment method included)."""
    table: dict[str, ToolSpec] = {}
    for spec in specs:
        if spec.name in table:
            raise InputError(
                f"two tools are named {spec.name!r} ({_where(table[spec.name].function)} and "
                f"{_where(spec.function)}); tool names must be unique"
            )
        table[spec.name] = spec
    return table


def tools_for_template(specs: Sequence[ToolSpec]) -> list[dict]:
    """The `tools=` list of `apply_chat_template`: one {"type": "function", "function": ...} per tool."""
    return [spec.schema() for spec in specs]


def template_takes_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders `tools=` (False: it ignores them, so use `render_tools`)."""
    probe = ToolSpec("probe_tool_7f3a", "A probe.", {"type": "object", "properties": {}}, lambda: None)
    turns = [{"role": "user", "content": "hi"}]
    plain = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    with_tools = tokenizer.apply_chat_template(
        turns, tools=tools_for_template([probe]), tokenize=False, add_generation_prompt=True
    )
    return plain != with_tools


def format_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The text of one call in the documented format."""
    return f"{CALL_OPEN}{json.dumps({'name': name, 'arguments': dict(arguments)}, ensure_ascii=False)}{CALL_CLOSE}"


def render_tools(specs: Sequence[ToolSpec]) -> str:
    """The system-turn text for a template without a tool format: the tools' JSON schemas, then the call format."""
    listed = "\n".join(json.dumps(spec.schema(), ensure_ascii=False) for spec in specs)
    example = format_tool_call("<tool name>", {"<argument>": "<value>"})
    return (
        "You may call tools. Their descriptions, as JSON schemas:\n"
        f"<tools>\n{listed}\n</tools>\n\n"
        "To call a tool, write one call, a JSON object with the tool's name and its arguments, between the tags:\n"
        f"{example}\n"
        "Its result comes back in the next turn. Only the first call in a reply runs. "
        f"To give your final answer, reply without {CALL_OPEN}."
    )


def parse_tool_call(text: str) -> ToolCall | None:
    """The first call in an assistant turn, None when there is none (the turn is an answer). A missing
    closing tag is tolerated (generation may stop at it); malformed JSON, a missing name or arguments
    that are not an object give a ToolCall carrying `error`."""
    start = text.find(CALL_OPEN)
    if start < 0:
        return None
    body_start = start + len(CALL_OPEN)
    end = text.find(CALL_CLOSE, body_start)
    body = text[body_start : end if end >= 0 else len(text)].strip()
    later = text[end:].count(CALL_OPEN) if end >= 0 else 0
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        return ToolCall(None, {}, f"malformed JSON in {CALL_OPEN}: {exc.msg} (at character {exc.pos})", later)
    if not isinstance(call, dict):
        return ToolCall(None, {}, 'a tool call must be a JSON object {"name": ..., "arguments": {...}}', later)
    name, arguments = call.get("name"), call.get("arguments", {})
    if not isinstance(name, str) or not name:
        return ToolCall(None, {}, 'the tool call has no "name" (a non-empty string)', later)
    if not isinstance(arguments, dict):
        return ToolCall(name, {}, f'"arguments" must be a JSON object, got {type(arguments).__name__}', later)
    return ToolCall(name, arguments, None, later)


def _type_error(value: Any, schema: Mapping) -> str | None:
    """Why `value` does not fit a simple JSON-schema `schema` (type, enum, array items), else None."""
    if value is None and schema.get("nullable"):
        return None
    if "anyOf" in schema:
        return None if any(_type_error(value, s) is None for s in schema["anyOf"]) else "matches none of anyOf"
    if "enum" in schema and value not in schema["enum"]:
        return f"must be one of {schema['enum']}"
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    known = [k for k in kinds if k in _JSON_TYPES]
    if known and not any(_fits(value, k) for k in known):
        return f"must be {' or '.join(known)}, got {type(value).__name__} {value!r:.40}"
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            if (why := _type_error(item, schema["items"])) is not None:
                return f"item {i} {why}"
    return None


def _fits(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind != "boolean":
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES[kind])


def argument_errors(spec: ToolSpec, arguments: Mapping[str, Any]) -> list[str]:
    """What is wrong with a call's arguments: extra or missing names, values of the wrong JSON type."""
    properties = spec.parameters.get("properties", {})
    errors = [f"unexpected argument {name!r}" for name in arguments if name not in properties]
    errors += [f"missing argument {name!r}" for name in spec.parameters.get("required", []) if name not in arguments]
    errors += [
        f"argument {name!r} {why}"
        for name, value in arguments.items()
        if name in properties and (why := _type_error(value, properties[name])) is not None
    ]
    if not errors:
        try:
            inspect.signature(spec.function).bind(**arguments)
        except TypeError as exc:
            errors.append(str(exc))
    return errors


def result_text(value: Any) -> str:
    """A tool's return value as the tool turn's text (str as is, None as "", JSON values dumped)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, tuple, int, float, bool)):
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _call_in_thread(function: Callable, arguments: dict, timeout_s: float) -> tuple[bool, Any, BaseException | None]:
    """(finished, value, exception) of `function(**arguments)` in a daemon thread, waited `timeout_s`."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = function(**arguments)
        except BaseException as exc:  # reported as the tool's error result
            outcome["exception"] = exc

    worker = threading.Thread(target=work, name=f"tool-{getattr(function, '__name__', 'call')}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return False, None, None  # abandoned: it runs on, unwaited, until it returns or the process exits
    return True, outcome.get("value"), outcome.get("exception")


def run_tool(call: ToolCall, tools: Sequence[ToolSpec] | Mapping[str, ToolSpec], timeout_s: float) -> ToolResult:
    """Run one call; every failure is an error result (see the module's departures 3 to 5)."""
    if call.error is not None:
        return ToolResult(f"error: {call.error}", error=True)
    table = tools if isinstance(tools, Mapping) else tool_table(tools)
    spec = table.get(call.name)
    if spec is None:
        return ToolResult(f"error: unknown tool {call.name!r}; the tools are {', '.join(sorted(table))}", error=True)
    if spec.environment is not None and spec.environment.timed_out:
        return ToolResult("error: the environment timed out on an earlier call; the episode ends", True, True)
    if errors := argument_errors(spec, call.arguments):
        return ToolResult(f"error: {spec.name}: {'; '.join(errors)}", error=True)
    arguments = {
        k: int(v) if isinstance(v, float) and spec.parameters["properties"][k].get("type") == "integer" else v
        for k, v in call.arguments.items()
    }
    finished, value, exception = _call_in_thread(spec.function, arguments, timeout_s)
    if not finished:
        if spec.environment is not None:
            spec.environment.timed_out = True
        return ToolResult(
            f"error: {spec.name} timed out after {timeout_s:g} s", error=True, end_episode=spec.environment is not None
        )
    if exception is not None:
        return ToolResult(f"error: {spec.name} raised {type(exception).__name__}: {exception}", error=True)
    return ToolResult(result_text(value))
