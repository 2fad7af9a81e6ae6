"""Each stage's command line is its config dataclass, parsed by transformers' HfArgumentParser, so
every config key is also a `--flag` with the field's help text."""

import json
import sys
from dataclasses import asdict

from transformers import HfArgumentParser


def parse_config(config_class, argv=None):
    parser = HfArgumentParser(config_class)
    (config,) = parser.parse_args_into_dataclasses(args=argv, look_for_args_file=False)
    return config


def print_config(config) -> None:
    """The resolved config goes first in every stage's log."""
    print(f"{type(config).__name__} " + json.dumps(asdict(config), indent=2, default=str), file=sys.stderr, flush=True)
