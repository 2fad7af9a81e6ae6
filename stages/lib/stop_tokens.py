"""Where generation stops, for any model: the end of a chat turn or of a document, and a response format's
stop strings as token ids where each is one token. Every backend (transformers, vLLM, TRL's sampling) and
every published model's generation config take their stop ids from here."""

# Qwen2.5's ChatML end tokens (the tiny tokenizer has the same ones): the end of a document, of a turn.
END_OF_TEXT, IM_END = "<|endoftext|>", "<|im_end|>"


def stop_token_ids(tokenizer) -> list[int]:
    """Generation stops at the end of a chat turn or at the end of a document. Both are named, not
    taken from the eos: a Qwen2.5 base tokenizer's eos is <|endoftext|>, while a model fine-tuned on
    its ChatML template ends its turns with <|im_end|>."""
    ids = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(END_OF_TEXT),
           tokenizer.convert_tokens_to_ids(IM_END)}
    return sorted(i for i in ids if i is not None and i != tokenizer.unk_token_id)


def split_stop_strings(tokenizer, stop_strings) -> tuple[list[int], list[str]]:
    """Stop strings that are one token become stop ids (cheap, and any backend honours them); the
    others stay strings, for backends that can stop on text."""
    ids, strings = [], []
    for text in stop_strings:
        token_ids = tokenizer(text, add_special_tokens=False).input_ids
        if len(token_ids) == 1:
            ids.append(token_ids[0])
        else:
            strings.append(text)
    return ids, strings
