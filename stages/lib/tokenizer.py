"""The tiny base model's tokenizer: byte-level BPE trained on the corpus with the `tokenizers`
library, digits split one per token, wrapped as a transformers fast tokenizer with a chat template."""

import jinja2
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from stages.lib.stop_tokens import END_OF_TEXT, IM_END
from stages.lib.templates import THINK_TAGS

IM_START = "<|im_start|>"
# Qwen2.5's: a turn ends with <|im_end|>, padding is <|endoftext|>, no bos
CHATML_TOKENS = {"eos_token": IM_END, "pad_token": END_OF_TEXT, "additional_special_tokens": [IM_START]}

# Qwen2.5-style ChatML, without a default system prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def chat_template_renderer():
    """Renders conversations exactly as the tokenizer's chat template does, without a tokenizer
    (the data stage needs it before the tokenizer exists)."""
    template = jinja2.Environment().from_string(CHAT_TEMPLATE)
    return lambda messages: template.render(messages=messages, add_generation_prompt=False)


def train_tokenizer(texts, vocab_size: int, tags_as_tokens: bool = True, special_tokens: dict = CHATML_TOKENS,
                    chat_template: str = CHAT_TEMPLATE) -> PreTrainedTokenizerFast:
    """`tags_as_tokens: False` leaves the template tags to the BPE, several tokens each, as in Qwen2.5's
    vocabulary (the rehearsal's models). `special_tokens` (eos_token, pad_token, bos_token,
    additional_special_tokens) are the only special tokens in the vocabulary."""
    # in this order, the tiny tokenizer's ids are those it always had
    names = [special_tokens.get("pad_token"), *special_tokens.get("additional_special_tokens", []),
             special_tokens.get("eos_token"), special_tokens.get("bos_token")]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[n for n in dict.fromkeys(names) if n],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    named = {"bos_token": None, **{k: v for k, v in special_tokens.items() if k != "additional_special_tokens"}}
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token=None, **named)
    wrapped.add_special_tokens({"additional_special_tokens": special_tokens.get("additional_special_tokens", [])})
    # Ordinary (non-special) added tokens: GRPO decodes with skip_special_tokens=True, and the
    # format reward must still see the tags.
    if tags_as_tokens:
        wrapped.add_tokens(list(THINK_TAGS), special_tokens=False)
    wrapped.chat_template = chat_template
    wrapped.model_max_length = 1024
    return wrapped
