"""A pre-trained model's chat template from the config (`chat_template` beside `name_or_path` or `build`): a
Jinja file, or a tokenizer directory whose template to use.

Where it applies: the stages that render chats with a pre-trained model's own tokenizer, which are the SFT
and reward-model stages that start from it (`--chat_template`, passed by their rules). A trained model
saves its tokenizer with the template it was trained with, so every stage after it (GRPO, generation,
rejection sampling, evaluation), the published model and its model card's load snippet carry that
template without being told. The pre-trained directory is never written (a user's own is used in place;
a hub model's fetched copy stays as downloaded), and a changed template reruns the stages that trained
with it, not a download or a pre-training.

Torch-free: the workflow's config checks read templates here too.
"""

import json
from pathlib import Path

# Where a tokenizer directory keeps its template, in the order transformers reads them (a chat_template.jinja
# wins over tokenizer_config.json's key; a processor's chat_template.json is no tokenizer's template).
TEMPLATE_FILE, TOKENIZER_CONFIG = "chat_template.jinja", "tokenizer_config.json"
KEY_HINT = "a Jinja file or tokenizer directory"


def own_chat_template(directory) -> str | dict | None:
    """A tokenizer directory's own chat template, read from its files without loading the tokenizer (named
    templates as a dict, as the tokenizer holds them); None when it has none."""
    directory = Path(directory)
    if (directory / TEMPLATE_FILE).is_file():
        return (directory / TEMPLATE_FILE).read_text()
    if (directory / TOKENIZER_CONFIG).is_file():
        template = json.loads((directory / TOKENIZER_CONFIG).read_text()).get("chat_template")
        if isinstance(template, list):
            template = {named["name"]: named["template"] for named in template}
        return template or None
    return None


def chat_template_text(source: str) -> str | dict:
    """The template a `chat_template` key names: a Jinja file's text, or a tokenizer directory's own."""
    path = Path(source)
    template = own_chat_template(path) if path.is_dir() else path.read_text()
    if not template:
        raise ValueError(f"chat_template: {source} holds no chat template")
    return template


def chat_template_problem(key: str, source: str) -> str | None:
    """Why a `chat_template` key's value cannot be used (`key`: its path in the config), or None."""
    path = Path(source)
    if path.is_dir():
        return None if own_chat_template(path) else (
            f"{key}: {source} is a directory without a chat template ({TEMPLATE_FILE}, or `chat_template` in "
            f"{TOKENIZER_CONFIG}); name {KEY_HINT}")
    if not path.is_file():
        return f"{key}: {source} is no file or directory; name {KEY_HINT}"
    if not path.read_text().strip():
        return f"{key}: {source} is empty; name {KEY_HINT}"
    return None


def missing_template_error(model_key: str, path: str, stages: list[str]) -> str:
    """The one line for a model whose tokenizer has no chat template while stages render chats with it
    (`model_key`: base, or distill.students.<name>)."""
    stage = f"stage {stages[0]} renders" if len(stages) == 1 else f"stages {', '.join(stages)} render"
    return (f"{model_key}.name_or_path: {path} has no chat template and {stage} chats: set "
            f"{model_key}.chat_template to {KEY_HINT}")


def load_tokenizer(model_path: str, chat_template: str = ""):
    """A model's tokenizer, with the template a `chat_template` key names in place of its own."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if chat_template:
        tokenizer.chat_template = chat_template_text(chat_template)
    return tokenizer
