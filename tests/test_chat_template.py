"""A pre-trained model's `chat_template` key: refused at plan time where a chat stage would fail without one,
and the template the stages render chats with (stages/lib/chat_template.py)."""

import pytest
import yaml
from datasets import Dataset
from transformers import AutoTokenizer

from stages.lib.chat_template import load_tokenizer
from stages.lib.config_checks import cross_field_errors, missing_chat_template, schema_errors
from stages.lib.tokenizer import CHAT_TEMPLATE, train_tokenizer
from stages.sft import within_length
from tests.snakemake_helpers import REPO, snakemake, write_config

TEXTS = ["Ben has 17 pens. How many pens does Ben have now? 18"] * 20


@pytest.fixture(scope="module")
def no_template_dir(tmp_path_factory):
    """A tokenizer without a chat template, as GPT-2's ships."""
    directory = tmp_path_factory.mktemp("gpt2_nochat")
    train_tokenizer(TEXTS, 300, chat_template=None).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def chatml_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("templates") / "chatml.jinja"
    path.write_text(CHAT_TEMPLATE)
    return path


def tiny_with(**models) -> dict:
    config = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    config.update(models)
    return config


def chat_template_lines(config: dict) -> list[str]:
    assert not schema_errors(config)
    return [line for line in cross_field_errors(config) if "chat template" in line or "chat_template" in line]


def test_a_base_without_a_chat_template_is_refused_when_a_chat_stage_is_planned(no_template_dir, chatml_file,
                                                                               tmp_path, venv_env):
    """Only a target that renders chats over the model needs its template: the R1-Zero branch plans, Dev1 is
    refused at plan time naming the stage and the key (it used to fail in the SFT job)."""
    config = write_config(tmp_path, tiny_with(base={"name_or_path": str(no_template_dir)}))
    assert snakemake(tmp_path, config, "-n", "r1_zero_branch", env=venv_env).returncode == 0
    refused = snakemake(tmp_path, config, "-n", "dev1", env=venv_env, check=False)
    assert refused.returncode != 0 and (
        f"ValueError: base.name_or_path: {no_template_dir} has no chat template and stage cold_start_sft renders "
        "chats: set base.chat_template to a Jinja file or tokenizer directory") in refused.stdout + refused.stderr
    assert missing_chat_template("distill.students.small", {"name_or_path": str(no_template_dir)}, "distill") == (
        f"distill.students.small.name_or_path: {no_template_dir} has no chat template and stage distill renders "
        "chats: set distill.students.small.chat_template to a Jinja file or tokenizer directory")
    assert missing_chat_template("base", {"name_or_path": str(no_template_dir), "chat_template": "t.jinja"},
                                 "cold_start_sft") is None

    fixed = tiny_with(base={"name_or_path": str(no_template_dir), "chat_template": str(chatml_file)})
    assert chat_template_lines(fixed) == []
    fixed["base"]["chat_template"] = str(no_template_dir)  # a tokenizer directory must have one to lend
    assert chat_template_lines(fixed) == [
        f"base.chat_template: {no_template_dir} is a directory without a chat template (chat_template.jinja, or "
        "`chat_template` in tokenizer_config.json); name a Jinja file or tokenizer directory"]
    fixed["base"]["chat_template"] = str(tmp_path / "chatml.jnja")
    assert chat_template_lines(fixed) == [
        f"base.chat_template: {tmp_path / 'chatml.jnja'} is no file or directory; name a Jinja file or tokenizer "
        "directory"]


def test_trl_s_chat_template_path_is_refused_for_the_model_s_key():
    """SFT renders every conversation (its length filter) before TRL would read it: it had no effect."""
    config = tiny_with()
    config["cold_start_sft"]["trainer_args"] = {"chat_template_path": "chatml.jinja"}
    assert ("cold_start_sft.trainer_args.chat_template_path: set by the workflow from the pre-trained model's "
            "`chat_template` (base.chat_template, distill.students.<name>.chat_template)"
            ) in cross_field_errors(config)


def test_the_key_s_template_reaches_sft_s_length_filter_and_the_model_it_saves(no_template_dir, chatml_file,
                                                                             tmp_path):
    conversations = Dataset.from_list([{"prompt": [{"role": "user", "content": "Ben has 17 pens."}],
                                        "completion": [{"role": "assistant", "content": "18"}]}] * 3)
    with pytest.raises(ValueError, match="chat_template is not set"):  # the job's failure in the review
        within_length(conversations, AutoTokenizer.from_pretrained(no_template_dir), 1024)
    tokenizer = load_tokenizer(str(no_template_dir), str(chatml_file))
    kept, too_long = within_length(conversations, tokenizer, 1024)
    assert (len(kept), too_long) == (3, 0)
    tokenizer.save_pretrained(tmp_path / "trained")  # as save_model_for_publication does
    assert AutoTokenizer.from_pretrained(tmp_path / "trained").chat_template == CHAT_TEMPLATE
    # a tokenizer directory lends its own template
    assert load_tokenizer(str(no_template_dir), str(tmp_path / "trained")).chat_template == CHAT_TEMPLATE
