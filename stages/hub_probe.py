"""Checks what a real config reads from the hub against what the code expects, before the first run: run
it on the login node (where the hub is reachable), after `huggingface-cli login` for the gated sets.

    python -m stages.hub_probe --configfile configs/qwen2.5-1.5b.yaml [--rows 200]

For every data source of `data.hub.sets` it streams the first `--rows` rows and maps them with
prepare_data's own code (columns, nested fields, types, gold answers, test cases), and for the cold start
it measures how many conversations fit `cold_start_sft.max_length` in the base model's tokenizer. For
every model it loads the config and tokenizer and reads the chat template (the config's `chat_template` where
it sets one: present, its default system turn, whether it opens the reasoning), the end-of-sequence token
and the context length against the lengths the config trains it at. It prints one table with the commit each
hub id resolves to now, and exits 1 with what differs; `--write-pins FILE` writes those commits as a config
file to layer on the run's (`hub_revisions`, stages/lib/hub.py).
"""

import argparse
import itertools
import sys
from collections import Counter
from datetime import date
from pathlib import Path

import yaml

from stages.lib.chat_template import chat_template_text, missing_template_error
from stages.lib.config_checks import chat_stages, pretrained_models
from stages.lib.data.schema import kind_of
from stages.lib.data.sources import BadRow, convert, load_source
from stages.lib.hub import LOCAL, pin_revisions, resolved_revision
from stages.lib.settings import layered_config, settings_at
from stages.lib.templates import CHAT, reasoning_prefill

PROBE_QUESTION = "What is 2 + 3?"
# A probed set passes when at least this share of its first rows maps (prepare_data drops the rest, counted)
MIN_USABLE_SHARE = 0.5


def probe_source(stem: str, source: dict, rows: int, seed: int) -> tuple[dict, list[dict], str | None]:
    """(a table row, the converted rows, the problem or None)."""
    where = f"data.hub.sets.{stem}: {source['path']}" + (f" ({source['name']})" if source.get("name") else "")
    try:
        raw = list(itertools.islice(load_source(source, streaming=True), rows))
    except Exception as error:  # the hub's own message says what is wrong (config, split, gating, network)
        return {"what": where, "result": "unreadable"}, [], f"{where}: {type(error).__name__}: {str(error)[:300]}"
    converted, reasons = [], Counter()
    for row in raw:
        try:
            converted.append(convert(row, kind_of(stem), source, seed))
        except BadRow as problem:
            reasons[str(problem)[:80]] += 1
    columns = sorted(raw[0]) if raw else []
    usable = len(converted) / len(raw) if raw else 0.0
    result = {"what": where, "result": f"{len(converted)}/{len(raw)} rows map", "columns": ", ".join(columns)}
    if reasons:
        result["bad rows"] = "; ".join(f"{n} x {reason}" for reason, n in reasons.most_common(3))
    problem = None
    if not raw:
        problem = f"{where}: no rows in split {source.get('split', 'train')!r}"
    elif usable < MIN_USABLE_SHARE or (stem.startswith("eval_") and reasons):
        problem = (f"{where}: {len(raw) - len(converted)} of the first {len(raw)} rows cannot be read "
                   f"({result['bad rows']}); its columns are {columns}, the config maps {source.get('fields', {})}")
    return result, converted, problem


def trace_lengths(conversations: list[dict], tokenizer) -> list[int]:
    return [len(tokenizer.apply_chat_template(row["messages"])["input_ids"]) for row in conversations]


def cold_start_fit(config: dict, conversations: list[dict], tokenizer) -> tuple[str, str | None]:
    """How many of the probed conversations fit cold_start_sft's window, and whether the pool holds its
    max_examples at that share."""
    sft = settings_at(config, "cold_start_sft")
    window, wanted = sft.get("max_length", 1024), sft.get("max_examples", 0)
    lengths = trace_lengths(conversations, tokenizer)
    fitting = sum(n <= window for n in lengths)
    share = fitting / len(lengths) if lengths else 0.0
    pool = sum(source.get("max_rows", 0) for source in config["data"]["hub"]["sets"].get("cold_start", []))
    line = (f"{fitting}/{len(lengths)} fit cold_start_sft.max_length={window} (longest {max(lengths, default=0)} "
            f"tokens)")
    if wanted and pool and share * pool < wanted:
        return line, (f"data.hub.sets.cold_start: at the {share:.0%} of traces that fit {window} tokens, a pool of "
                      f"{pool} rows (max_rows) holds ~{share * pool:.0f}, short of cold_start_sft.max_examples="
                      f"{wanted}: raise max_rows to {int(wanted / max(share, 1e-9) * 1.2) + 1} or more")
    return line, None


def trained_lengths(config: dict, key: str) -> tuple[int, int]:
    """(the longest sequence the config trains or samples the model at, the context it extends it to)."""
    if key == "base.name_or_path":
        sections = [settings_at(config, s) for s in ("cold_start_sft", "mixture_sft")]
        return max(s.get("max_length", 0) for s in sections), 0
    if key.startswith("distill.students."):
        student = key.split(".")[2]
        sft = {**settings_at(config, "distill.sft"), **config["distill"]["students"][student].get("sft", {})}
        return sft.get("max_length", 0), sft.get("extend_context_to", 0)
    return settings_at(config, "evaluation.settings").get("max_new_tokens", 0), 0


def model_revision(config: dict, key: str) -> str | None:
    """The `revision:` beside a model's `name_or_path` key, if the config pins one."""
    return settings_at(config, key.rsplit(".", 1)[0]).get("revision")


def probe_model(key: str, path: str, config: dict) -> tuple[dict, str | None, object]:
    from transformers import AutoConfig, AutoTokenizer

    revision = model_revision(config, key)
    try:
        model_config = AutoConfig.from_pretrained(path, revision=revision)
        tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
    except Exception as error:
        return {"what": f"{key}: {path}", "result": "unreadable"}, f"{key}: {path}: {str(error)[:300]}", None
    model_key = key.rsplit(".", 1)[0]
    own_template = settings_at(config, model_key).get("chat_template")
    if own_template:  # the stages render chats with the config's template (stages/lib/chat_template.py)
        tokenizer.chat_template = chat_template_text(own_template)
    context = getattr(model_config, "max_position_embeddings", None)
    longest, extended = trained_lengths(config, key)
    row = {"what": f"{key}: {path}", "result": f"context {context}", "eos": tokenizer.eos_token}
    problem = None
    if not tokenizer.chat_template:
        row["template"] = "none"
        stages = chat_stages(config).get(model_key)
        problem = (missing_template_error(model_key, path, stages) if stages
                   else f"{key}: {path} has no chat template (the chat stages and evaluation need one)")
    else:
        rendered = CHAT.render(PROBE_QUESTION, tokenizer)
        row["template"] = ", ".join(filter(None, [
            "default system turn" if rendered.count("system") > 0 else "",
            f"opens the reasoning ({reasoning_prefill(rendered)!r})" if reasoning_prefill(rendered) else ""])) \
            or "plain"
    if context and longest > (extended or context) and not key.startswith("evaluation."):
        problem = problem or (f"{key}: {path} has {context} positions, the config trains it at {longest} tokens: "
                              "lower max_length, or set extend_context_to")
    return row, problem, tokenizer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.hub_probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", type=Path, nargs="+", required=True, help="As given to snakemake.")
    parser.add_argument("--rows", type=int, default=200, help="Rows streamed from each data source.")
    parser.add_argument("--write-pins", type=Path, dest="write_pins",
                        help="Write the commit of every hub id probed to this file, as `hub_revisions:`: a config "
                             "file to layer last on the run's (--configfile ... PINS).")
    args = parser.parse_args(argv)
    config = layered_config(args.configfile)
    pin_revisions(config)
    if "hub" not in config.get("data", {}):
        raise SystemExit("hub_probe: this config builds its own data (data.tiny): nothing on the hub to probe")
    table, problems, cold_start = [], [], []
    tokenizers = {}
    for key, path in pretrained_models(config).items():
        row, problem, tokenizer = probe_model(key, path, config)
        tokenizers[key] = tokenizer
        row.update(id=path, revision=_revision(path, "model", model_revision(config, key)))
        table.append(row)
        problems += [problem] if problem else []
    for stem, sources in config["data"]["hub"]["sets"].items():
        for source in sources:
            row, converted, problem = probe_source(stem, source, args.rows, config.get("seed", 0))
            row.update(id=source["path"], revision=_revision(source["path"], "dataset", source.get("revision")))
            table.append(row)
            problems += [problem] if problem else []
            if stem == "cold_start":
                cold_start += converted
    base_tokenizer = tokenizers.get("base.name_or_path")
    if cold_start and base_tokenizer is not None:
        line, problem = cold_start_fit(config, cold_start, base_tokenizer)
        table.append({"what": "cold start traces", "result": line})
        problems += [problem] if problem else []
    for row in table:
        details = " | ".join(str(value) if key == "result" else f"{key}: {value}" for key, value in row.items()
                             if key not in ("what", "id"))
        print(f"{row['what']}\n    {details}")
    if problems:
        print(f"\n{len(problems)} difference(s) between the hub and what the config expects:")
        print("\n".join(f"  - {problem}" for problem in problems))
        return 1
    if args.write_pins:
        write_pins(args.write_pins, table, args.configfile)
    else:
        print("\nthe hub holds what the config expects; pin its commits with --write-pins FILE to keep it so")
    return 0


def write_pins(path: Path, table: list[dict], configfiles: list[Path]) -> None:
    """`hub_revisions:` for every hub id of the table whose commit resolved (a path here has none)."""
    pins = {row["id"]: row["revision"] for row in table
            if row.get("id") and row.get("revision") and row["revision"] != LOCAL
            and not row["revision"].startswith("unresolved")}
    # It opens with a newline: README step 5 appends it to a site file, whose last line may have none
    header = (f"\n# Written by `python -m stages.hub_probe --write-pins` on {date.today()} for "
              f"{' '.join(map(str, configfiles))}.\n# Layer it last: --configfile ... {path}. To move a pin, "
              "probe again and review what changed (the hub's\n# commit history of that id), or edit one line.\n")
    path.write_text(header + yaml.safe_dump({"hub_revisions": pins}, sort_keys=True))
    print(f"\nthe hub holds what the config expects; {len(pins)} commits pinned in {path}")


def _revision(path: str, kind: str, revision: str | None) -> str:
    try:
        return resolved_revision(path, revision, kind)
    except Exception as error:  # offline, or gated without a login: the table says so
        return f"unresolved ({type(error).__name__})"


if __name__ == "__main__":
    sys.exit(main())
