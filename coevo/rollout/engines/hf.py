"""Generation with a transformers model: batched sampling with a KV cache.

A hand-rolled decode loop rather than `model.generate`, because RL needs exactly what was sampled and
its logprobs: prompts are left-padded, each step samples from softmax(logits / temperature) after
top-p filtering, and the logprob recorded is that of the temperature-scaled distribution before
top-p (what the trainer recomputes). Sampling uses a seeded torch.Generator, so the same seed gives
the same completions on CPU. Generation stops at EOS or max_new_tokens (or, when asked, after the
first token whose text holds a line break). A group's n samples share
one prefill of their prompt (`shared_prefill`: its KV cache is expanded to the n rows), as vLLM's
prefix cache does: with short completions the prompts are most of the tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor
from transformers import AutoModelForCausalLM

from coevo.config import SamplingConfig
from coevo.model.checkpoint import Policy, load_policy
from coevo.rollout.prompting import encode_prompts
from coevo.types import Generation
from coevo.update.logprobs import pack_prompts, shared_prefill

_NEWLINE_IDS: dict[int, list[int]] = {}  # vocabulary fingerprint -> its line-break token ids


class HFEngine:
    def __init__(self, policy: Policy, batch_size: int = 512):
        self.policy = policy
        self.batch_size = batch_size
        self.add_special_tokens = True  # False for chat-templated prompts (coevo/rollout/prompting.py): no double BOS
        self._newline_ids: list[int] | None = None

    @property
    def tokenizer(self):
        return self.policy.tokenizer

    @property
    def model(self):
        return self.policy.model

    def load_weights(self, weights: Mapping[str, Tensor] | str | Path) -> None:
        """A state dict or a checkpoint directory; a LoRA checkpoint sets a LoRA model's adapters,
        or is merged into its base for a plain model."""
        from coevo.model.lora import is_adapter_dir, is_lora, load_adapter_weights, merged_state_dict

        if isinstance(weights, (str, Path)) and is_adapter_dir(weights):
            if is_lora(self.model):
                load_adapter_weights(self.model, weights)
                return
            weights = merged_state_dict(load_policy(weights, "cpu", str(self.model.dtype).removeprefix("torch.")).model)
        elif isinstance(weights, (str, Path)):
            weights = AutoModelForCausalLM.from_pretrained(weights, local_files_only=True).state_dict()
        self.model.load_state_dict(weights)

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        n: int,
        sampling: SamplingConfig,
        seed: int,
        stop_at_newline: bool = False,
    ) -> list[list[Generation]]:
        generator = torch.Generator(device=self.model.device).manual_seed(seed)
        encoded = encode_prompts(self.policy.tokenizer, prompts, self.add_special_tokens)
        flat = [ids for ids in encoded for _ in range(n)]
        stops = [self.policy.tokenizer.eos_token_id, *(self.newline_ids() if stop_at_newline else [])]
        outputs: list[Generation] = []
        for start in range(0, len(flat), self.batch_size):
            outputs.extend(self._generate_batch(flat[start : start + self.batch_size], sampling, generator, stops))
        return [outputs[i * n : (i + 1) * n] for i in range(len(prompts))]

    def newline_ids(self) -> list[int]:
        """Token ids whose text holds a line break. Decoding a vocabulary takes ~0.6 s (SmolLM2's
        49k tokens) and an HF engine is built per checkpoint, so the ids are kept per vocabulary
        (its fingerprint, ~0.06 s, taken once per engine)."""
        if self._newline_ids is None:
            tok = self.policy.tokenizer
            vocabulary = hash(frozenset(tok.get_vocab().items()))
            if vocabulary not in _NEWLINE_IDS:
                pieces = tok.batch_decode([[i] for i in range(len(tok))])
                _NEWLINE_IDS[vocabulary] = [i for i, piece in enumerate(pieces) if "\n" in piece]
            self._newline_ids = _NEWLINE_IDS[vocabulary]
        return self._newline_ids

    def _generate_batch(
        self, prompt_ids: list[list[int]], sampling: SamplingConfig, generator: torch.Generator, stops: list[int]
    ) -> list[Generation]:
        tok, model = self.policy.tokenizer, self.model
        stop_ids = torch.tensor(stops, device=model.device)
        packed = pack_prompts(prompt_ids, tok.pad_token_id, model.device)  # the distinct prompts, prefilled once
        logits, cache, attention, positions = shared_prefill(model, *packed)  # [B, V], KV cache, [B, P], [B, 1]
        logits = logits.float()
        tokens, logprobs = [], []
        done = torch.zeros(len(prompt_ids), dtype=torch.bool, device=model.device)  # [B]
        for step in range(sampling.max_new_tokens):
            token, logprob = sample_next(logits, sampling, generator)  # [B], [B]
            token = torch.where(done, torch.full_like(token, tok.pad_token_id), token)
            tokens.append(token)
            logprobs.append(logprob)
            done = done | torch.isin(token, stop_ids)
            if bool(done.all()) or step == sampling.max_new_tokens - 1:
                break
            attention = torch.cat([attention, torch.ones_like(token).unsqueeze(-1)], dim=-1)  # [B, P+t]
            positions = positions + 1  # [B, 1]
            out = model(
                input_ids=token.unsqueeze(-1),
                attention_mask=attention,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :].float()
        return self._collect(prompt_ids, torch.stack(tokens, 1), torch.stack(logprobs, 1), set(stops))

    def _collect(
        self, prompt_ids: list[list[int]], tokens: Tensor, logprobs: Tensor, stops: set[int]
    ) -> list[Generation]:
        """Cut each row after its first stop token (EOS, kept: the policy learns to stop; or a line
        break when asked) and decode it; `finished` = it ended at a stop, not at max_new_tokens."""
        tok = self.policy.tokenizer
        results = []
        for prompt, row_tokens, row_logprobs in zip(prompt_ids, tokens.tolist(), logprobs.tolist()):
            end = next((i for i, token in enumerate(row_tokens) if token in stops), None)
            length = len(row_tokens) if end is None else end + 1
            ids = row_tokens[:length]
            results.append(
                Generation(
                    prompt_ids=prompt,
                    token_ids=ids,
                    logprobs=row_logprobs[:length],
                    text=tok.decode(ids, skip_special_tokens=True),
                    finished=end is not None,
                )
            )
        return results


def sample_next(logits: Tensor, sampling: SamplingConfig, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Next token per row and its logprob under softmax(logits / T). Greedy when temperature is 0."""
    if sampling.temperature == 0:
        logprobs = torch.log_softmax(logits, dim=-1)  # [B, V]
        token = logprobs.argmax(-1)  # [B]
        return token, logprobs.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    logprobs = torch.log_softmax(logits / sampling.temperature, dim=-1)  # [B, V]
    probs = logprobs.exp()  # [B, V]
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)  # [B, V]
        outside = sorted_probs.cumsum(-1) - sorted_probs > sampling.top_p  # [B, V] tokens past the nucleus
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # [B]
    return token, logprobs.gather(-1, token.unsqueeze(-1)).squeeze(-1)
