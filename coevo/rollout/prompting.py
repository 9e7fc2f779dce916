"""How a problem and its co-evolver context become the one prompt string a model sees (`prompt.format`).

Renderers are chosen by name from `PROMPT_FORMATS` and share one contract:
`render(problem, context) -> str` and `encode(texts) -> token ids`. Every place that builds a
prompt goes through them (rollout, evaluation, the policy update's bare and teacher prompts, the
engines' tokenisation), so the trainer scores exactly the tokens the engine saw.

- "plain" (the tiny policy's layout): the context lines, one per line, then the bare question; the
  tiny policy's warm start shows it worked examples in exactly this layout. The tokenizer adds its
  special tokens (BOS) when encoding. A conversational problem (`messages`) is an error here.
- "chat" (instruct models): the tokenizer's own chat template (`apply_chat_template(...,
  add_generation_prompt=True)`), as TRL and vLLM render conversational data. The conversation is
  the problem's `messages` (TRL's conversational format) or one user turn holding the question;
  `prompt.system` becomes the system turn when the conversation has none. The co-evolver context
  (skills, memory, the self-teacher's privileged lines) goes INSIDE the last user turn, under
  `prompt.context_header`, before the question; never before the template. The answer-format
  instruction (`prompt.instruction`) follows a math question and precedes a code stub, which is
  shown in a ```python fence (bare, SmolLM2-135M-Instruct "closes" the stub with a fence and
  answers in prose: 15 of 40 HumanEval answers, docs/benchmarks/chat-humaneval.md). The
  template writes the special tokens itself, so encoding adds none (no double BOS).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coevo.code.families import CODE_FAMILIES
from coevo.config import PromptConfig
from coevo.registry import Registry
from coevo.rollout.tools import ToolSpec, render_tools, template_takes_tools, tools_for_template

PROMPT_FORMATS = Registry("prompt format")
# The key of a problem row (as a role poses it, coevo/rollout/roles.py) naming its entry of
# prompt.instruction, where the row's kind would pick another; a name no dataset column takes.
ROLE_INSTRUCTION = "_coevo_instruction"
ROLES = ("system", "user", "assistant")
Problem = str | Mapping[str, Any]


def render_prompt(question: str, context: Sequence[str] = ()) -> str:
    """The plain layout: context lines, then the bare question."""
    return "".join(f"{line}\n" for line in context) + question


def conversation_of(problem: Problem) -> list[dict]:
    """A problem's `messages` (a JSON string or a list of {role, content}); [] when it has none."""
    if isinstance(problem, str):
        return []
    messages = problem.get("messages")
    if isinstance(messages, str):
        messages = json.loads(messages) if messages.strip() else None
    return [dict(m) for m in messages] if messages is not None and len(messages) else []


def _question(problem: Problem) -> str:
    return (
        problem
        if isinstance(problem, str)
        else str(problem.get("prompt") if problem.get("prompt") is not None else problem.get("question"))
    )


def _is_code(problem: Problem) -> bool:
    return not isinstance(problem, str) and problem.get("family") in CODE_FAMILIES


class _Renderer:
    add_special_tokens = True  # whether encoding adds the tokenizer's special tokens (BOS)

    def __init__(
        self,
        cfg: PromptConfig,
        tokenizer: Any = None,
        checkpoint: str | Path | None = None,
        tools: Sequence[ToolSpec] = (),
    ):
        self.cfg, self.tokenizer, self.checkpoint = cfg, tokenizer, checkpoint
        self.tools = tuple(tools)  # shown in the prompt (chat; the config refuses tools with plain)
        self.prepare()

    def prepare(self) -> None:
        """What the format needs of the tokenizer, checked and settled (chat: native tools) at construction."""

    def render_all(self, problems: Sequence[Problem], contexts: Sequence[Sequence[str]] | None = None) -> list[str]:
        contexts = contexts if contexts is not None else [()] * len(problems)
        return [self.render(p, c) for p, c in zip(problems, contexts)]

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of rendered prompts, exactly as the engines encode them."""
        return encode_prompts(self.tokenizer, texts, self.add_special_tokens)


@PROMPT_FORMATS.register("plain")
class PlainRenderer(_Renderer):
    def render(self, problem: Problem, context: Sequence[str] = ()) -> str:
        if conversation_of(problem):
            raise ValueError(
                f"problem {problem.get('id', '?')!r} is a conversation (`messages`), which prompt.format: plain "
                f"cannot render; "
                "set prompt.format: chat (the tokenizer's chat template)"
            )
        return render_prompt(_question(problem), context)


@PROMPT_FORMATS.register("chat")
class ChatRenderer(_Renderer):
    add_special_tokens = False  # the chat template writes BOS and the role markers itself

    def prepare(self) -> None:
        check_chat_template(self.tokenizer, self.checkpoint)
        # the chat template renders `tools=` itself, else render_tools' text goes in the system turn
        self.native_tools = bool(self.tools) and template_takes_tools(self.tokenizer)

    def messages(self, problem: Problem, context: Sequence[str] = ()) -> list[dict]:
        """The conversation to template: system turn, earlier turns, then the user turn carrying
        the context, the question and the instruction."""
        turns = conversation_of(problem) or [{"role": "user", "content": _question(problem)}]
        if self.cfg.system is not None and turns[0]["role"] != "system":
            turns.insert(0, {"role": "system", "content": self.cfg.system})
        last = max(i for i, turn in enumerate(turns) if turn["role"] == "user")
        code = _is_code(problem)
        kind = problem.get(ROLE_INSTRUCTION) or ("code" if code else "math")  # a role names its own (roles.py)
        instruction = getattr(self.cfg.instruction, kind)
        parts = []
        if context:
            parts.append("\n".join(([self.cfg.context_header] if self.cfg.context_header else []) + list(context)))
        if instruction and code:
            parts.append(instruction)
        question = turns[last]["content"]
        parts.append(f"```python\n{question.rstrip()}\n```" if code and "```" not in question else question)
        if instruction and not code:
            parts.append(instruction)
        turns[last] = {"role": "user", "content": "\n\n".join(parts)}
        return turns

    def render(self, problem: Problem, context: Sequence[str] = ()) -> str:
        turns = self.messages(problem, context)
        if not self.tools:
            return self.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        if self.native_tools:  # the model's own tool format
            return self.tokenizer.apply_chat_template(
                turns, tools=tools_for_template(self.tools), tokenize=False, add_generation_prompt=True
            )
        described = render_tools(self.tools)  # coevo's documented format, in the system turn
        if turns[0]["role"] == "system":
            turns[0] = {"role": "system", "content": f"{turns[0]['content']}\n\n{described}"}
        else:
            turns.insert(0, {"role": "system", "content": described})
        return self.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)


def prompt_renderer(
    cfg: PromptConfig, tokenizer: Any = None, checkpoint: str | Path | None = None, tools: Sequence[ToolSpec] = ()
) -> _Renderer:
    """The renderer of `prompt.format` over `tokenizer` (named by `checkpoint` in errors); `tools`:
    shown to the model in the prompt (chat only; coevo/rollout/episodes.py `renderer_for`)."""
    return PROMPT_FORMATS[cfg.format](cfg, tokenizer, checkpoint, tools)


def encode_prompts(
    tokenizer: Any, texts: Sequence[str | Sequence[int]], add_special_tokens: bool = True
) -> list[list[int]]:
    """Token ids of prompt texts; `add_special_tokens=False` for texts a chat template rendered. A
    prompt given as token ids passes as it is (an episode's later turns, coevo/rollout/episodes.py)."""
    strings = [text for text in texts if isinstance(text, str)]
    encoded = iter(tokenizer(strings, add_special_tokens=add_special_tokens)["input_ids"] if strings else [])
    return [list(next(encoded)) if isinstance(text, str) else [int(i) for i in text] for text in texts]


def check_chat_template(tokenizer: Any, checkpoint: str | Path | None) -> None:
    """A clear error when `prompt.format: chat` meets a tokenizer without a chat template."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"prompt.format: chat needs the tokenizer's chat template, but the tokenizer of "
            f"{checkpoint or 'the policy'} has none; "
            "use prompt.format: plain, or a checkpoint whose tokenizer_config.json / chat_template.jinja holds one"
        )


def check_prompt_format(cfg: PromptConfig, checkpoint: str | Path | None) -> None:
    """Before a run writes anything: under `prompt.format: chat`, the checkpoint's tokenizer must
    have a chat template (checked when the checkpoint directory exists)."""
    if cfg.format != "chat":
        return
    if checkpoint is None:
        raise ValueError(
            "prompt.format: chat needs policy.checkpoint, a model whose tokenizer has a chat template; the "
            "bootstrapped tiny policy has none (use prompt.format: plain)"
        )
    if not Path(checkpoint).is_dir():
        return  # a missing checkpoint is reported by the policy loader, naming the path
    from transformers import AutoTokenizer

    check_chat_template(AutoTokenizer.from_pretrained(str(checkpoint), local_files_only=True), checkpoint)


def validate_messages(messages: object) -> list[str]:
    """Problems with one row's `messages` (TRL's conversational format): a non-empty list of
    {role, content} with roles system/user/assistant, non-empty string contents, ending in a user turn."""
    if not isinstance(messages, list) or not messages:
        return [
            (
                f"expected a non-empty list of {{role, content}} objects, got "
                f"{type(messages).__name__ if messages is not None else 'null'}"
            )
        ]
    errors = []
    for i, turn in enumerate(messages):
        if not isinstance(turn, dict) or set(turn) != {"role", "content"}:
            errors.append(f"turn {i}: expected an object with exactly the keys role and content, got {turn!r:.80}")
        elif turn["role"] not in ROLES:
            errors.append(f"turn {i}: unknown role {turn['role']!r} (expected one of {', '.join(ROLES)})")
        elif not isinstance(turn["content"], str) or not turn["content"].strip():
            errors.append(f"turn {i}: empty content (or not a string)")
    if not errors and messages[-1]["role"] != "user":
        errors.append(f"the last turn is {messages[-1]['role']!r}; it must be the user's question")
    return errors
