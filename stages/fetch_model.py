"""Copies a hub model into the run (results/<run>/<stage>/) once, on the login node (rule
`fetch_model`, a localrule), so compute jobs, which often have no internet, load a local directory.

    python -m stages.fetch_model --name_or_path Qwen/Qwen2.5-Math-1.5B --output_dir results/q/base
"""

from dataclasses import dataclass, field

from stages.lib.artifacts import staged_output
from stages.lib.cli import parse_config, print_config
from stages.lib.hub import resolved_revision

# Weights in other formats that the hub repos of Qwen and Llama also carry: never loaded here.
SKIPPED_FILES = ["original/*", "*.pth", "*.gguf", "*.onnx", "*.msgpack", "*.h5"]


@dataclass
class FetchModelConfig:
    name_or_path: str = field(metadata={"help": "Hub model id."})
    output_dir: str = field(metadata={"help": "The model directory to write."})
    revision: str = field(default="", metadata={"help": "Branch, tag or commit (default: the main branch)."})


def main(argv=None):
    from huggingface_hub import snapshot_download
    from transformers import AutoConfig, AutoTokenizer

    config = parse_config(FetchModelConfig, argv)
    print_config(config)
    # The commit first, then its files: the manifest records the commit downloaded, not a branch that moves.
    commit = resolved_revision(config.name_or_path, config.revision or None, "model")
    with staged_output(config.output_dir, "fetch_model", config, inputs={}) as (scratch, headline):
        snapshot_download(config.name_or_path, revision=commit, local_dir=scratch, ignore_patterns=SKIPPED_FILES)
        model_config = AutoConfig.from_pretrained(scratch)  # fails here, not in a compute job, if incomplete
        AutoTokenizer.from_pretrained(scratch)
        headline.update({"model_type": model_config.model_type, "source": config.name_or_path,
                         "revision": config.revision or "main", "commit": commit})
    print(f"fetched {config.name_or_path} into {config.output_dir}")


if __name__ == "__main__":
    main()
