"""Multi-turn episodes: every sample the policy draws is an episode; one turn without tools is the special case.

With `tools:` or `environment.factory` set (`Config.episodes`), a rollout or evaluation sample is an
episode: the engine generates an assistant turn; its first `<tool_call>` runs (coevo/rollout/tools.py)
and the result becomes a tool turn; the policy continues from the whole episode so far, until it
answers without a call, `environment.max_turns` assistant turns, or `environment.max_tokens`.
Without them `sample` renders the prompts and calls the engine once, exactly as before.

Tokens. An episode is one token sequence: the prompt, each assistant turn as sampled, and between
turns the tool turn's *bridge* tokens. The engine continues from token ids, never from re-tokenised
text, so the trainer scores exactly what was sampled. `Generation.policy_mask` is 1 on the sampled
tokens and 0 on the bridges, whose sampling logprobs are recorded as 0.0; the update trains the
policy's tokens only (coevo/update/logprobs.py `pack`).

Bridges. The chat template alone says how a tool turn looks: the bridge is what closes the
assistant turn after its sampled end-of-turn token, then the text by which the template's rendering
of [assistant turn, tool turn] + generation prompt extends its rendering of [assistant turn].
SmolLM2-135M-Instruct's: `\\n<|im_start|>tool\\n{result}<|im_end|>\\n<|im_start|>assistant\\n`.

Batching and seeds. The live episodes of a turn go to the engine in one call, seeded by
(caller's seed, turn): the rollout's seed is (seed, iteration, stage), so a resumed run samples the
same episodes. An environment instance is made per episode (TRL's `environment_factory`) and reset
with its problem row; a non-empty initial observation is appended to the last user turn.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coevo.config import Config, EnvironmentConfig, SamplingConfig
from coevo.errors import InputError
from coevo.faults import pause_point
from coevo.plugins import load_plugin
from coevo.rollout.engines import with_prompt_format
from coevo.rollout.engines.base import Engine
from coevo.rollout.prompting import encode_prompts, prompt_renderer
from coevo.rollout.tools import (
    ToolSpec,
    environment_tools,
    load_tools,
    new_environment,
    parse_tool_call,
    reset_environment,
    run_tool,
    tool_table,
)
from coevo.seeding import derive_seed
from coevo.types import Generation

_PROBE = [{"role": "user", "content": "probe"}]


@dataclass(frozen=True)
class Toolbox:
    """What an episode may call: the stateless `tools:` and, per episode, a fresh `environment.factory` instance."""

    factory: str | None
    tools: tuple[ToolSpec, ...]
    specs: tuple[ToolSpec, ...]  # every tool the model is shown: the stateless ones, then the environment's

    def open(self, row: Mapping[str, Any]) -> tuple[dict[str, ToolSpec], object | None, str | None]:
        """One episode's tools by name, its environment and the environment's initial observation
        (None, None without an environment class)."""
        if self.factory is None:
            return tool_table(self.tools), None, None
        instance = new_environment(self.factory)
        observation = reset_environment(instance, row)
        return tool_table([*self.tools, *environment_tools(instance)]), instance, observation


@functools.lru_cache(maxsize=8)
def _toolbox(factory: str | None, tools: tuple[str, ...]) -> Toolbox:
    loaded = tuple(load_tools(tools))
    shown = [*loaded, *(environment_tools(new_environment(factory)) if factory else [])]
    tool_table(shown)  # two tools of one name are an error before any episode runs
    return Toolbox(factory, loaded, tuple(shown))


def toolbox(cfg: Config) -> Toolbox | None:
    """The run's tools (imported once per process), None when a sample is one turn without tools."""
    return _toolbox(cfg.environment.factory, tuple(cfg.tools)) if cfg.episodes else None


def episode_sources(cfg: Config) -> list[dict]:
    """The source records ({"function", "path", "sha256"}) of the run's tools and environment class, for the lineage."""
    named = [*cfg.tools, *([cfg.environment.factory] if cfg.environment.factory else [])]
    return [load_plugin(path)[1] for path in named]


def renderer_for(cfg: Config, tokenizer: Any):
    """`prompt.format`'s renderer, showing the run's tools in the prompt when it has some."""
    box = toolbox(cfg)
    return prompt_renderer(cfg.prompt, tokenizer, tools=box.specs if box else ())


@dataclass
class _Episode:
    prompt: str
    prompt_ids: list[int]
    tools: dict[str, ToolSpec]
    environment: object | None
    ids: list[int] = field(default_factory=list)  # the completion: assistant turns and bridges
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)
    answer: str = ""
    finished: bool = False
    truncated: bool = False
    tool_calls: int = 0
    tool_errors: int = 0
    done: bool = False

    def generation(self) -> Generation:
        return Generation(
            prompt_ids=self.prompt_ids,
            token_ids=self.ids,
            logprobs=self.logprobs,
            text=self.answer,
            finished=self.finished,
            policy_mask=self.mask,
            messages=self.messages,
            turns=sum(m["role"] == "assistant" for m in self.messages),
            tool_calls=self.tool_calls,
            tool_errors=self.tool_errors,
            truncated=self.truncated,
            prompt=self.prompt,
            environment=self.environment,
        )


def sample(
    engine: Engine,
    cfg: Config,
    rows: Sequence[Mapping[str, Any]],
    contexts: Sequence[Sequence[str]] | None,
    n: int,
    sampling: SamplingConfig,
    seed: int,
) -> list[list[Generation]]:
    """n samples of each problem row under its context (outer list follows `rows`): episodes when the
    run has tools, else one engine call on the rendered prompts."""
    renderer = renderer_for(cfg, with_prompt_format(engine, cfg).tokenizer)
    contexts = contexts if contexts is not None else [()] * len(rows)
    box = toolbox(cfg)
    if box is None:
        prompts = renderer.render_all(rows, contexts)
        generations = engine.generate(prompts, n, sampling, seed)
        for prompt, group in zip(prompts, generations):
            for generation in group:
                generation.prompt = prompt
        return generations
    episodes = [open_episode(box, renderer, row, context) for row, context in zip(rows, contexts) for _ in range(n)]
    for episode, ids in zip(
        episodes, encode_prompts(engine.tokenizer, [e.prompt for e in episodes], engine.add_special_tokens)
    ):
        episode.prompt_ids = ids
    run_turns(engine, episodes, cfg.environment, sampling, seed)
    flat = [e.generation() for e in episodes]
    return [flat[i * n : (i + 1) * n] for i in range(len(rows))]


def open_episode(box: Toolbox, renderer: Any, row: Mapping[str, Any], context: Sequence[str] = ()) -> _Episode:
    """A new episode of `row`: its tools and a fresh environment reset with the row, and its prompt as
    `renderer` renders it, the environment's initial observation appended to the question."""
    tools, environment, observation = box.open(row)
    shown = dict(row) if not observation else {**row, "prompt": f"{_question(row)}\n\n{observation}"}
    return _Episode(renderer.render(shown, context), [], tools, environment)


def replay(cfg: Config, row: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]) -> object | None:
    """An episode's environment as the episode left it, for reward functions that read `environments`
    after the episode's process is gone (a resumed run, the verification stage): a fresh instance reset
    with the row, each recorded call made again in order. None without an environment class. An
    environment whose state depends on more than its row and the calls (the clock, unseeded
    randomness) may end in another state than it did in the episode."""
    box = toolbox(cfg)
    if box is None or box.factory is None:
        return None
    tools, environment, _ = box.open(row)
    for turn, reply in zip(messages, messages[1:]):
        if turn["role"] == "assistant" and reply["role"] == "tool" and (call := parse_tool_call(turn["content"])):
            run_tool(call, tools, cfg.environment.tool_timeout_s)
    return environment


def _question(row: Mapping[str, Any]) -> str:
    return str(row.get("prompt") if row.get("prompt") is not None else row.get("question"))


def run_turns(
    engine: Engine, episodes: list[_Episode], settings: EnvironmentConfig, sampling: SamplingConfig, seed: int
) -> None:
    """Advance every episode to its end, one batched engine call per turn."""
    tokenizer = engine.tokenizer
    for turn in range(settings.max_turns):
        live = [e for e in episodes if not e.done]
        if not live:
            return
        pause_point("turn", f"{seed}.{turn}")  # between an episode's turns (the SIGKILL test)
        generations = engine.generate(
            [e.prompt_ids + e.ids for e in live], 1, sampling, derive_seed(seed, "turn", turn)
        )
        for episode, (generation,) in zip(live, generations):
            _take_turn(episode, generation, tokenizer, settings, sampling, last_turn=turn == settings.max_turns - 1)


def _take_turn(
    episode: _Episode,
    generation: Generation,
    tokenizer: Any,
    settings: EnvironmentConfig,
    sampling: SamplingConfig,
    last_turn: bool,
) -> None:
    """Record one sampled assistant turn; run its tool call and append the bridge, or end the episode."""
    episode.ids += generation.token_ids
    episode.logprobs += generation.logprobs
    episode.mask += [1] * len(generation.token_ids)
    episode.messages.append({"role": "assistant", "content": generation.text})
    episode.answer, episode.finished = generation.text, generation.finished
    call = parse_tool_call(generation.text) if generation.finished else None
    if call is None:  # an answer, or a turn cut at max_new_tokens: the episode ends
        episode.done = True
        return
    result = run_tool(call, episode.tools, settings.tool_timeout_s)
    episode.tool_calls += 1
    episode.tool_errors += int(result.error)
    episode.messages.append({"role": "tool", "content": result.content})
    bridge = bridge_ids(tokenizer, generation, result.content)
    over_budget = len(episode.ids) + len(bridge) + sampling.max_new_tokens > settings.max_tokens
    if last_turn or result.end_episode or over_budget:
        episode.done = episode.truncated = True  # a call with no turn left to read its result
        episode.finished = False
        return
    episode.ids += bridge
    episode.logprobs += [0.0] * len(bridge)
    episode.mask += [0] * len(bridge)


def bridge_ids(tokenizer: Any, generation: Generation, result: str) -> list[int]:
    """The tokens between an assistant turn (as sampled, ending in its end-of-turn token) and the next
    assistant turn: the rest of the turn's closing, the tool turn holding `result`, the generation prompt."""
    return tokenizer(bridge_text(tokenizer, generation, result), add_special_tokens=False)["input_ids"]


def bridge_text(tokenizer: Any, generation: Generation, result: str) -> str:
    """The text of `bridge_ids` (see the module doc), from two renderings of a probe conversation."""
    content = generation.text
    assistant = [*_PROBE, {"role": "assistant", "content": content}]
    before = tokenizer.apply_chat_template(assistant, tokenize=False)
    after = tokenizer.apply_chat_template(
        [*assistant, {"role": "tool", "content": result}], tokenize=False, add_generation_prompt=True
    )
    if not after.startswith(before):
        raise InputError(
            "the chat template renders a conversation with a tool turn differently from the same conversation "
            "without it (not prefix-consistent), so an episode cannot continue from its sampled tokens; use a "
            "model whose template appends turns"
        )
    start = before.rfind(content.strip())
    if start < 0:
        raise InputError(
            f"the chat template does not render an assistant turn's text as it was sampled ({content.strip()!r:.60}), "
            "so the episode's tool turn cannot be placed after it"
        )
    closing = before[start + len(content.strip()) :]
    last = tokenizer.decode(generation.token_ids[-1:], skip_special_tokens=False) if generation.token_ids else ""
    if last and closing.startswith(last) and generation.token_ids[-1] in tokenizer.all_special_ids:
        closing = closing[len(last) :]  # the sampled end-of-turn token is the closing's first piece
    return closing + after[len(before) :]
