"""Character-level tokenizer of the tiny default policy, saved in Hugging Face format.

One token per character (digits, operators, letters, punctuation, space, newline) plus <pad>, <bos>,
<eos> and <unk>. It is a `tokenizers` WordLevel model over single characters, so `AutoTokenizer`
and vLLM load it from the checkpoint directory like any other fast tokenizer.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
CHARS = string.digits + "+-*=/.,:;()?!'\" \n" + string.ascii_letters + "#{}[]<>_%$&|\\^~@`"
# A chat template for the character tokenizer with its own tool format (the tools' names on one line
# before the turns; each turn `<role>content` and a newline): the tiny policy asked in the chat format
# and shown tools, for episodes on the CPU in seconds (bench/tiny_episodes.py, the episode tests). The
# build does not set it: the tiny default's layout is the plain one.
TOOL_CHAT_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<tools>{% for t in tools %}{{ t.function.name }} {% endfor %}\n{% endif %}"
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(SPECIALS + list(CHARS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=4096,
    )
