"""A model card (README.md) for every model directory the pipeline publishes, written from its
manifest: what the model is, which stage made it from what, with which settings, and how to prompt
it. A directory that already has a README.md (a hub model's own card, fetched) keeps it."""

import json
from pathlib import Path

from stages.lib.recipe import description_of, stage_of, template_of
from stages.lib.rewards.registry import weighted_rewards
from stages.lib.templates import MATH_INSTRUCTION, response_format

# A level-1 problem of the tiny config's own family (stages/lib/data/arithmetic.py): the tiny models answer it,
# and so does any real one.
EXAMPLE_QUESTION = "Ana has 17 apples. She buys 5 apples. How many apples does Ana have now?"
SETTINGS = ("learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
            "gradient_accumulation_steps", "questions_per_step", "num_generations", "max_length",
            "max_completion_length", "beta", "temperature", "rewards", "seed")


def paper_name(stage: str) -> str:
    """What the model is, in the paper's words; a fetched model is what its own card says."""
    try:
        return description_of(stage)
    except KeyError:
        return stage


def how_to_prompt(stage: str, model_dir: str) -> str:
    try:
        kind, template = stage_of(stage)[0].kind, template_of(stage)
    except KeyError:  # a model fetched for another role (the judge) speaks its own chat template
        kind, template = "", "chat"
    if kind == "reward_model":
        return ("A sequence-classification model: it scores a whole conversation (the tokenizer's chat template "
                "applied to prompt and response); a higher score is a preferred response.")
    fmt = response_format(template)
    return f"{fmt.usage}\n\n```python\n{usage_snippet(model_dir, fmt)}```"


def usage_snippet(model_dir: str, fmt) -> str:
    """Python that loads the model and answers a question the tiny model's training covers, in its own
    format: the README shows it and every model card carries it (tests run both)."""
    question = EXAMPLE_QUESTION
    if fmt.chat_template:
        prompt = f"""messages = [{{"role": "user", "content": {json.dumps(f"{question} {MATH_INSTRUCTION}")}}}]
inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
"""
        stop = ""
    else:
        prompt = f"""template = {json.dumps(fmt.template())}
inputs = tokenizer(template.format(question={json.dumps(question)}), return_tensors="pt")
"""
        stop = f", stop_strings={json.dumps(list(fmt.stop_strings))}, tokenizer=tokenizer"
    return f"""from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained({json.dumps(model_dir)})
model = AutoModelForCausalLM.from_pretrained({json.dumps(model_dir)})
{prompt}out = model.generate(**inputs, max_new_tokens=1024, do_sample=True, temperature=0.6, top_p=0.95{stop})
print(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
"""


def setting_line(key: str, config: dict) -> str:
    """One setting of the card; the rewards each with its weight (a user's own by its reference, whose file's
    sha256 is among the inputs)."""
    if key == "rewards" and "reward_weights" in config:
        return f"- rewards (weight): {weighted_rewards(config['rewards'], config['reward_weights'])}"
    return f"- {key}: {json.dumps(config[key])}"


def model_card(manifest: dict) -> str:
    stage, config = manifest["stage"], manifest.get("config", {})
    inputs = "\n".join(f"- {name}: `{item['path']}`" + (f" → `{item['links_to']}`" if "links_to" in item else "")
                       + f" (sha256 {item['sha256'][:12]})" for name, item in manifest.get("inputs", {}).items())
    settings = "\n".join(setting_line(key, config) for key in SETTINGS if key in config)
    metrics = "\n".join(f"- {key}: {json.dumps(value)}" for key, value in manifest.get("metrics", {}).items())
    return f"""# {paper_name(stage)}

Made by the `{stage}` stage of r1-pipeline (a reproduction of the DeepSeek-R1 training recipe) at code
version `{manifest.get('code_version', '?')}`. Its evaluation is the `evaluate` job's output for this
model (under `eval/` in the run directory, summarized in `report/`); the full record of this stage is
`manifest.json`.

## Started from

{inputs or "- (nothing: built here)"}

## Settings

{settings or "- see manifest.json"}

## Training summary

{metrics or "- see manifest.json"}

## How to prompt it

{how_to_prompt(stage, config.get("output_dir", "."))}
"""


def write_model_card(directory: Path, manifest: dict) -> None:
    if (directory / "config.json").exists() and not (directory / "README.md").exists():
        (directory / "README.md").write_text(model_card(manifest))
