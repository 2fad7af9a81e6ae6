"""SFT token efficiency: TRL's SFTTrainer (as stages.sft runs it) on a seeded long-tailed set of
conversations, in three modes: padded batches without packing, padding-free without packing, and
packing (bfd, which TRL runs padding-free).

    .venv/bin/python bench/sft_tokens.py --steps 40 --scale 64 --threads 1 --rounds 3

The lengths follow the paper's SFT data scaled down by `--scale`: completions lognormal (sigma 1)
with a mean of 5,000/scale tokens, cut at 32,768/scale (= max_length); at the default scale 64 a
mean of ~78 tokens, a tail to 512. Prompts are short questions (~26 tokens with the chat
template's own tokens; the paper's are a few percent of a 5K-token example). The model is the
project's tiny Qwen2 (stages.base_model.build_model: 4 layers, hidden 128) with a BPE tokenizer
trained here (stages.lib.tokenizer.train_tokenizer): nothing is downloaded. Each mode starts from the
same weights and trains `--steps` steps (fp32, CPU); `--rounds` repeats all modes, alternating
their order.

Per mode, counted by a wrapper around the trainer's own collator over the batches it fed the
model: the share of padding positions, the non-padding and loss (completion) tokens, and tokens per
second of training (steps 2..N, after the warm-up step; per wall second and per CPU second of
this process, which a job sharing the cores disturbs less); plus the trainer's set-up time (dataset
preparation) and the wall time. Also checks that a padding-free forward pass gives the logits of
one-sequence-at-a-time forward passes (no attention across documents with this attention
implementation). Prints the table, a recommendation for this device, and the command.
"""

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import datasets
import torch
import transformers
from datasets import Dataset
from transformers import TrainerCallback, set_seed
from trl import SFTConfig, SFTTrainer

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from stages.base_model import BaseModelConfig, build_model  # noqa: E402
from stages.lib.tokenizer import train_tokenizer  # noqa: E402
from stages.sft import to_prompt_completion  # noqa: E402

PAPER_MEAN_TOKENS, PAPER_MAX_TOKENS = 5000, 32768
WORDS = """let number value sum product term equation side divide multiply add subtract gives check result
answer case first second next since because therefore wait actually maybe compute find solve factor
root square prime even odd integer fraction ratio area length angle triangle circle radius point line
slope function graph polynomial degree constant variable expression simplify expand substitute back
original problem need must try again another way verify works true false correct careful formula rule
sequence series digit count remainder modulo divisible greater less equal positive negative total each
only possible minimum maximum probability choose ways pairs order left right half twice times plus
minus over under between given known assume suppose consider look step so the of and to a in is""".split()
MODES = {  # name -> SFTConfig settings
    "padded": {"packing": False, "padding_free": False},
    "padding_free": {"packing": False, "padding_free": True, "max_length": None},  # TRL: max_length not enforced
    "packing_bfd": {"packing": True, "packing_strategy": "bfd"},
}


def completion_lengths(rng: random.Random, count: int, scale: float) -> list[int]:
    """Lognormal (sigma 1) with the paper's mean / scale, cut at its maximum / scale."""
    sigma = 1.0
    mu = math.log(PAPER_MEAN_TOKENS / scale) - sigma ** 2 / 2
    cap = int(PAPER_MAX_TOKENS / scale)
    return [min(cap, max(4, round(rng.lognormvariate(mu, sigma)))) for _ in range(count)]


def build_rows(rng: random.Random, tokenizer, lengths: list[int], max_length: int) -> list[dict]:
    """Conversations (stages.sft's `messages` rows) whose assistant turn has about the drawn length;
    the longest are trimmed until the whole conversation fits max_length (no mode truncates)."""
    questions = [f"What is {rng.randint(1, 99)} + {rng.randint(1, 99)}?" for _ in range(len(lengths))]
    ids = tokenizer([" ".join(rng.choices(WORDS, k=n)) for n in lengths], add_special_tokens=False)["input_ids"]
    keep = [max(1, n - 8) for n in lengths]  # the tags and the boxed answer take the rest

    def row(i: int) -> dict:
        body = tokenizer.decode(ids[i][: keep[i]])
        return {"id": f"x{i}", "messages": [{"role": "user", "content": questions[i]}, {
            "role": "assistant", "content": f"<think>\n{body}\n</think>\n\n\\boxed{{{i % 97}}}"}]}

    rows = [row(i) for i in range(len(lengths))]
    while True:
        over = [(i, n - max_length) for i, n in enumerate(conversation_tokens(tokenizer, rows)) if n > max_length]
        if not over:
            return rows
        for i, excess in over:
            keep[i] -= excess + 1
            rows[i] = row(i)


def conversation_tokens(tokenizer, rows: list[dict]) -> list[int]:
    rendered = [tokenizer.apply_chat_template(row["messages"], tokenize=False) for row in rows]
    return [len(ids) for ids in tokenizer(rendered, add_special_tokens=False)["input_ids"]]


class CountingCollator:
    """Wraps the trainer's collator; records, per batch, positions fed, real tokens and loss tokens."""

    def __init__(self, collator):
        self.collator = collator
        self.batches: list[tuple[int, int, int, int]] = []

    def __call__(self, examples):
        batch = self.collator(examples)
        real = sum(len(example["input_ids"]) for example in examples)
        documents = sum(len(example.get("seq_lengths") or [1]) for example in examples)  # packed rows hold several
        self.batches.append((batch["input_ids"].numel(), real, int((batch["labels"] != -100).sum()), documents))
        return batch


class StepClock(TrainerCallback):
    """Wall and process CPU time at the end of every step."""

    def __init__(self):
        self.ends: list[tuple[float, float]] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append((time.perf_counter(), time.process_time()))


def attention_check(model, sequences: list[list[int]]) -> float:
    """Max |logit difference| between one flattened padding-free forward (position_ids restarting per
    sequence, no attention mask: what TRL's padding-free collator feeds) and one forward per sequence."""
    model.eval()
    with torch.no_grad():
        alone = torch.cat([model(input_ids=torch.tensor([s])).logits[0] for s in sequences])
        flat = torch.tensor([[t for s in sequences for t in s]])
        positions = torch.tensor([[i for s in sequences for i in range(len(s))]])
        packed = model(input_ids=flat, position_ids=positions).logits[0]
    model.train()
    return float((alone - packed).abs().max())


def run_mode(name: str, dataset: Dataset, tokenizer, model_config: BaseModelConfig, args, workdir: Path,
             batch_size: int) -> dict:
    set_seed(args.seed)
    model = build_model(model_config, tokenizer)
    settings = {"max_length": args.max_length, **MODES[name]}
    config = SFTConfig(output_dir=str(workdir / name), max_steps=args.steps, per_device_train_batch_size=batch_size,
                       learning_rate=1e-3, lr_scheduler_type="constant", logging_steps=max(1, args.steps),
                       save_strategy="no", report_to=[], use_cpu=True, bf16=False, disable_tqdm=True,
                       dataloader_num_workers=0, seed=args.seed, **settings)
    started = time.perf_counter()
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer)
    setup_s = time.perf_counter() - started
    counter, clock = CountingCollator(trainer.data_collator), StepClock()
    trainer.data_collator = counter  # after __init__: TRL refuses a custom collator with padding-free
    trainer.add_callback(clock)
    train_started = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - train_started
    batches = counter.batches[: args.steps]
    steady = batches[1:]
    steady_s, steady_cpu_s = (end - start for end, start in zip(clock.ends[args.steps - 1], clock.ends[0]))
    positions, real, loss, documents = (sum(b[i] for b in batches) for i in range(4))
    return {"mode": name, "batch": batch_size, "examples_per_step": documents / len(batches), "setup_s": setup_s,
            "train_s": train_s,
            "wall_s": time.perf_counter() - started, "positions": positions, "real": real, "loss": loss,
            "pad_share": 1 - real / positions, "real_per_s": sum(b[1] for b in steady) / steady_s,
            "loss_per_s": sum(b[2] for b in steady) / steady_s,
            "loss_per_cpu_s": sum(b[2] for b in steady) / steady_cpu_s,
            "rows": len(trainer.train_dataset),
            "trainer": trainer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="Training steps per mode.")
    parser.add_argument("--scale", type=float, default=64,
                        help="Divides the paper's lengths (mean 5K, max 32K tokens).")
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--batch_size", type=int, default=8, help="Examples per step, padded and padding-free modes.")
    parser.add_argument("--packing_batch_size", type=int, default=0,
                        help="Packed rows per step (0: about as many examples per step as --batch_size).")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: steadier on a shared machine; 0: torch's default).")
    parser.add_argument("--rounds", type=int, default=3, help="Times every mode runs, in alternating order.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.max_length = int(PAPER_MAX_TOKENS / args.scale)
    datasets.disable_progress_bars()
    warnings.filterwarnings("ignore", category=FutureWarning)  # SFTConfig's own gradient_checkpointing default
    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)

    rng = random.Random(args.seed)
    tokenizer = train_tokenizer([" ".join(rng.choices(WORDS, k=200)) for _ in range(300)], vocab_size=600)
    lengths = completion_lengths(rng, args.examples, args.scale)
    rows = build_rows(rng, tokenizer, lengths, args.max_length)
    dataset = Dataset.from_list(to_prompt_completion(rows, "synthetic"))
    model_config = BaseModelConfig(corpus="", output_dir="", max_position_embeddings=args.max_length, seed=args.seed)
    torch.manual_seed(args.seed)

    totals = sorted(conversation_tokens(tokenizer, rows))
    pick = lambda q: totals[min(len(totals) - 1, int(q * len(totals)))]  # noqa: E731
    print(f"data: {len(totals):,} conversations, tokens per example mean {statistics.mean(totals):.0f}, "
          f"median {pick(0.5)}, p90 {pick(0.9)}, p99 {pick(0.99)}, max {totals[-1]} (max_length "
          f"{args.max_length}: {sum(t > args.max_length for t in totals)} longer; scale 1/{args.scale:g} of mean "
          f"{PAPER_MEAN_TOKENS:,} / max "
          f"{PAPER_MAX_TOKENS:,})", flush=True)
    packed_batch = (args.packing_batch_size
                    or max(1, round(args.batch_size * statistics.mean(totals) / args.max_length)))

    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sft-") as workdir:
        for round_index in range(args.rounds):
            order = args.modes if round_index % 2 == 0 else args.modes[::-1]  # alternate: drift hits every mode
            for name in order:
                if name in runs and not runs[name]:
                    continue  # refused in the first round
                batch = packed_batch if name == "packing_bfd" else args.batch_size
                try:
                    result = run_mode(name, dataset, tokenizer, model_config, args, Path(workdir) / str(round_index),
                                      batch)
                except Exception as error:  # a mode TRL refuses is reported, not fatal
                    print(f"{name}: not run: {type(error).__name__}: {error}")
                    runs[name] = []
                    continue
                trainer = result.pop("trainer")
                if name == "padding_free" and round_index == 0:
                    result["check"] = attention_check(trainer.model, [row["input_ids"] for row in
                                                                      trainer.train_dataset.select(range(4))])
                print(f"round {round_index + 1}: {name} done in {result['wall_s']:.0f} s, "
                      f"{result['loss_per_s']:,.0f} loss tok/s", flush=True)
                runs.setdefault(name, []).append(result)

    print(f"model: tiny Qwen2 (stages.base_model defaults), {len(tokenizer)} tokens of vocabulary, fp32 on "
          f"{torch.get_num_threads()} CPU thread(s); {args.steps} steps per mode and round, {args.rounds} round(s) in "
          f"alternating order; rates over steps 2..{args.steps}, mean of the rounds (min-max)")
    print("| mode | batch | examples/step | pad share | non-pad tokens | loss tokens | non-pad tok/s | loss tok/s | "
          "loss tok/CPU-s | setup s | train s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    spread = lambda values, fmt: (f"{format(statistics.mean(values), fmt)} ({format(min(values), fmt)}-"  # noqa: E731
                                  f"{format(max(values), fmt)})" if len(values) > 1 else format(values[0], fmt))
    for name, results in runs.items():
        if not results:
            continue
        r = results[0]  # the same batches every round: token counts do not change
        print(f"| {name} | {r['batch']}{' rows' if name == 'packing_bfd' else ''} | {r['examples_per_step']:.1f} | "
              f"{r['pad_share']:.1%} | {r['real']:,} | {r['loss']:,} | "
              + " | ".join(spread([x[key] for x in results], fmt) for key, fmt in (
                  ("real_per_s", ",.0f"), ("loss_per_s", ",.0f"), ("loss_per_cpu_s", ",.0f"), ("setup_s", ".1f"),
                  ("train_s", ".1f"))) + " |")
    if runs.get("padding_free"):
        check = runs["padding_free"][0]["check"]
        print(f"padding-free forward vs one sequence at a time: max |logit difference| {check:.2e} "
              f"({'documents kept apart' if check < 1e-3 else 'DOCUMENTS ATTEND ACROSS BOUNDARIES'})")
    if runs.get("padded"):
        for name in ("padding_free", "packing_bfd"):
            if not runs.get(name):
                continue
            for key, unit in (("loss_per_s", "wall second"), ("loss_per_cpu_s", "CPU second")):
                ratios = [x[key] / y[key] for x, y in zip(runs[name], runs["padded"])]
                verdict = ("faster" if min(ratios) > 1 else "slower" if max(ratios) < 1 else
                           "neither clearly faster nor slower (the rounds disagree)")
                print(f"on this device, {name.replace('_', ' ')} is {verdict} per trained token than padded "
                      f"batches: {statistics.mean(ratios):.2f}x the loss tokens per {unit} (rounds: "
                      f"{', '.join(f'{x:.2f}' for x in ratios)})")
    print(f"command: python bench/sft_tokens.py --steps {args.steps} --scale {args.scale:g} "
          f"--examples {args.examples} --batch_size {args.batch_size} --packing_batch_size {args.packing_batch_size} "
          f"--modes {' '.join(args.modes)} "
          f"--threads {args.threads} --rounds {args.rounds} --seed {args.seed}")


if __name__ == "__main__":
    main()
