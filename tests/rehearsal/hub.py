"""The hub as the real configs name it, laid out in the rehearsal's working directory: every data set
and model a real config names, at the path of its hub id (`open-r1/OpenR1-Math-220k/`,
`Qwen/Qwen2.5-Math-1.5B/`), so that the real config runs unchanged. `datasets.load_dataset` and
`from_pretrained` read a local directory of that name before they would ask the hub, and the
workflow takes a model directory that exists for a local model (rules/common.smk, pretrained_source).

Each data set has its hub original's columns, config names, data directories and split names, and a
few hundred rows (the tiny world's problems, instructions and preferences, in those columns), so the
real preparation code (stages/data/prepare.py) maps, filters and decontaminates them, with the real
sets' oddities planted (an escaped-dollar MATH-500 answer, a `proof` placeholder). Each Qwen model is
Qwen-shaped (Qwen2 architecture, tied embeddings, its real context: 4,096 positions for Qwen2.5-Math) with a
byte-level BPE tokenizer whose eos is <|endoftext|>, a ChatML template with Qwen2.5's default system
turn, and the template's tags split into several tokens, as Qwen2.5's own; the R1-Distill models carry
DeepSeek's tokenizer and template (build_models). All randomly initialised, since the rehearsal proves
the machinery, not the recipe. vLLM's CPU attention takes its head size (64).

    python -m tests.rehearsal.hub DIR
"""

import json
import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from stages.data.tiny import TinyDataConfig, generate
from stages.lib.stop_tokens import END_OF_TEXT, IM_END
from stages.lib.tokenizer import CHAT_TEMPLATE, CHATML_TOKENS, IM_START, chat_template_renderer, train_tokenizer

# The models the real configs name (base, students, published models), each built at its hub id.
MODELS = ["Qwen/Qwen2.5-Math-1.5B", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-7B",
          "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"]
MODEL_SHAPE = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                   intermediate_size=512)
# Each model's positions (max_position_embeddings in its config.json; real-ids-audit-4)
POSITIONS = {"Qwen/Qwen2.5-Math-1.5B": 4096, "Qwen/Qwen2.5-0.5B": 32768, "Qwen/Qwen2.5-7B": 131072,
             "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": 131072, "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": 131072}
VOCAB_SIZE = 1000
CODE_EVAL_ROWS = 500  # the configs hold out the coding set's first 500 rows (skip_rows / max_rows)
LARGE_TESTS_EVERY = 8  # every 8th training row of the coding set has ~150 KB of test cases
# OpenR1-Math's `default` config: enough rows for the 1.5B cold start's 5,000 examples that fit its window, after
# decontamination (~15% of the tiny world's problems share a 10-gram with an evaluation prompt) and the long ones
OPENR1_ROWS, OPENR1_DEFAULT_ROWS, LONG_TRACE_EVERY = 7400, 7000, 16
TOKENIZER_TEXT_CHARS = 4000  # of each row, to train the stand-ins' tokenizers (the long traces repeat themselves)
README = "---\nconfigs:\n{configs}---\n"

# R1-Distill's tokenizer (deepseek-ai/DeepSeek-R1-Distill-Qwen-*, tokenizer_config.json): DeepSeek's own chat
# tokens, no ChatML; a generation prompt that opens the reasoning (`<think>\n`); history cut after `</think>`.
BOS, EOS, USER, ASSISTANT = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"
R1_DISTILL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}" + USER + "{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}{% set content = message['content'] %}"
    "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    + ASSISTANT + "{{ content }}" + EOS + "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "<think>\n{% endif %}"
)
# Qwen2.5's templates write a default system turn when a conversation has none (Qwen2.5-Math: the math
# instruction; the others: "You are Qwen..."), as the real tokenizer_config.json files do.
QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def write_parquet(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def split_file(repo: Path, split: str, rows: list[dict], folder: str = "data") -> None:
    """A split as the hub's parquet conversion names it: <folder>/<split>-00000-of-00001.parquet."""
    write_parquet(repo / folder / f"{split}-00000-of-00001.parquet", rows)


def named_configs(repo: Path, configs: dict[str, dict[str, list[dict]]]) -> None:
    """A repository with named configs (`name:` in the source), declared in its README as the hub does."""
    entries = ""
    for name, splits in configs.items():
        entries += f"- config_name: {name}\n  data_files:\n"
        for split, rows in splits.items():
            split_file(repo, split, rows, folder=name)
            entries += f"  - split: {split}\n    path: {name}/{split}-*.parquet\n"
    (repo / "README.md").write_text(README.format(configs=entries))


def chat(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def hh_dialogue(prompt: str, reply: str) -> str:
    return f"\n\nHuman: {prompt}\n\nAssistant: {reply}"


def trace(worked_solution: str, long: bool) -> str:
    """A reasoning trace: the worked solution, or (long) the solution re-checked past 4,096 tokens."""
    if not long:
        return worked_solution
    return "\n".join(f"Let me check step {k} again: {worked_solution}" for k in range(300))


def stdin_problem(rng: random.Random, index: int, large: bool = False) -> dict:
    """A verifiable-coding-problems row: a statement, stdin/stdout cases and a gold program. The real set's
    rows hold ~145 KB of cases on average (large inputs): a `large` row's ten cases carry a second line of
    ~15 KB that the program reads past."""
    a, b = rng.randint(2, 9), rng.randint(1, 20)
    statement = f"Problem {index}: read an integer n from standard input and print {a} * n + {b}."
    padding = (lambda: " ".join(str(rng.randrange(10**6)) for _ in range(2200)) + "\n") if large else (lambda: "")
    cases = [{"type": "stdin_stdout", "input": f"{n}\n{padding()}", "output": f"{a * n + b}\n"}
             for n in rng.sample(range(50), 10 if large else 3)]
    return {"problem_id": f"rehearsal_{index}", "problem_statement": statement,
            "verification_info": {"language": "python", "test_cases": cases},
            "gold_standard_solution": f"```python\nn = int(input())\nprint({a} * n + {b})\n```"}


def build_datasets(root: Path, seed: int = 0) -> dict[str, int]:
    rng = random.Random(seed)
    tiny = generate(TinyDataConfig(output_dir="", seed=seed, num_rl_prompts=OPENR1_ROWS, num_cold_start=200,
                                   num_general=300, num_eval_math=80, num_eval_general=10, num_pretrain_docs=100,
                                   num_preference_pairs=300, num_rl_general=100, num_rl_code=10,
                                   num_cold_start_code=10, num_eval_code=10, num_pretrain_code_docs=10),
                    chat_template_renderer())
    math = [row for row in tiny["rl_prompts"] if row["domain"] == "math"]
    # OpenR1's messages: R1's own trace, reasoning in <think>, then a summary with the boxed answer. Its traces run
    # to ~16K tokens: every LONG_TRACE_EVERY-th here is longer than the 1.5B config's 4,096-token window.
    openr1 = [{"uuid": row["id"], "problem": row["prompt"], "answer": row["solution"],
               "solution": row["worked_solution"],
               "messages": chat(row["prompt"], f"<think>\n{trace(row['worked_solution'], i % LONG_TRACE_EVERY == 0)}"
                                               f"\n</think>\n\nThe answer is $\\boxed{{{row['solution']}}}$.")}
              for i, row in enumerate(math)]
    # NuminaMath's placeholder for a problem without a checkable answer (prepare_data drops it)
    placeholder = "Prove that the sum of two odd numbers is even."
    openr1.insert(5, {"uuid": "placeholder", "problem": placeholder, "answer": "proof", "solution": "",
                      "messages": chat(placeholder, "<think>\nWrite them 2a+1 and 2b+1.\n</think>\n\n"
                                                    "Their sum is 2(a+b+1), which is even.")})
    named_configs(root / "open-r1" / "OpenR1-Math-220k", {"default": {"train": openr1[:OPENR1_DEFAULT_ROWS]},
                                                         "extended": {"train": openr1[OPENR1_DEFAULT_ROWS:]}})
    coding = [stdin_problem(rng, i, large=i >= CODE_EVAL_ROWS and i % LARGE_TESTS_EVERY == 3)
              for i in range(CODE_EVAL_ROWS + 40)]
    split_file(root / "open-r1" / "verifiable-coding-problems-python", "train", coding)

    general = tiny["general"]
    ultrachat = [{"prompt_id": row["id"], "prompt": row["prompt"], "messages": chat(row["prompt"], row["reference"])}
                 for row in general]
    repo = root / "HuggingFaceH4" / "ultrachat_200k"
    split_file(repo, "train_sft", ultrachat[:200])
    split_file(repo, "test_sft", ultrachat[200:])

    helpful = tiny["preferences_helpful"]
    ultrafeedback = [{"prompt_id": row["id"], "prompt": row["prompt"], "chosen": chat(row["prompt"], row["chosen"]),
                      "rejected": chat(row["prompt"], row["rejected"]), "score_chosen": 8.0, "score_rejected": 3.0}
                     for row in helpful]
    repo = root / "HuggingFaceH4" / "ultrafeedback_binarized"
    split_file(repo, "train_prefs", [r for r, row in zip(ultrafeedback, helpful) if row["split"] == "train"])
    split_file(repo, "test_prefs", [r for r, row in zip(ultrafeedback, helpful) if row["split"] != "train"])

    harmless = tiny["preferences_harmless"]
    hh = [{"chosen": hh_dialogue(row["prompt"], row["chosen"]),
           "rejected": hh_dialogue(row["prompt"], row["rejected"])} for row in harmless]
    repo = root / "Anthropic" / "hh-rlhf"
    split_file(repo, "train", [r for r, row in zip(hh, harmless) if row["split"] == "train"], folder="harmless-base")
    split_file(repo, "test", [r for r, row in zip(hh, harmless) if row["split"] != "train"], folder="harmless-base")

    evals = tiny["eval_math"]
    split_file(root / "HuggingFaceH4" / "aime_2024", "train",
               [{"id": i, "problem": r["prompt"], "answer": r["solution"], "solution": r["worked_solution"],
                 "url": "", "year": "2024"} for i, r in enumerate(evals[:30])])
    math500 = [{"problem": r["prompt"], "solution": f"{r['worked_solution']} $\\boxed{{{r['solution']}}}$",
                "answer": r["solution"], "subject": "Prealgebra", "level": int(r["level"]), "unique_id": r["id"]}
               for r in evals[30:]]
    # MATH-500 writes money with an escaped dollar (3 of its 500 answers)
    math500[0].update(problem="A ticket costs 12 dollars. What do 3 tickets cost?", answer="\\$36",
                      solution="$3 \\cdot 12 = 36$, so $\\boxed{\\$36}$.")
    split_file(root / "HuggingFaceH4" / "MATH-500", "test", math500)
    gpqa = []
    for i in range(20):
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        wrong = rng.sample([n for n in range(4, 61) if n != a + b], 3)
        gpqa.append({"Record ID": f"rec{i}", "Question": f"A sample holds {a} units and gains {b}. How many now?",
                     "Correct Answer": str(a + b),
                     **{f"Incorrect Answer {k + 1}": str(w) for k, w in enumerate(wrong)}})
    named_configs(root / "Idavidrein" / "gpqa", {"gpqa_diamond": {"train": gpqa}})
    return {"openr1": len(openr1), "coding": len(coding), "ultrachat": len(ultrachat),
            "ultrafeedback": len(ultrafeedback), "hh_rlhf": len(hh), "aime24": 30, "math500": len(math500),
            "gpqa": len(gpqa)}


def qwen_template(default_system: str) -> str:
    """Qwen2.5's ChatML with the default system turn its tokenizer_config.json writes when none is given."""
    return ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\n" + default_system + "<|im_end|>\n{% endif %}"
            + CHAT_TEMPLATE)


def save_model(directory: Path, tokenizer, tied: bool, positions: int, seed: int) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    shape = {**MODEL_SHAPE, "tie_word_embeddings": tied, "max_position_embeddings": positions}
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=bos, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **shape)
    Qwen2ForCausalLM(config).save_pretrained(directory)
    tokenizer.model_max_length = positions
    tokenizer.save_pretrained(directory)
    GenerationConfig(bos_token_id=bos, eos_token_id=tokenizer.eos_token_id, do_sample=True, temperature=0.6,
                     top_p=0.95, max_new_tokens=2048).save_pretrained(directory)


def build_models(root: Path, texts: list[str], seed: int = 0) -> None:
    """Qwen2.5 stand-ins: a base tokenizer (eos <|endoftext|>), ChatML with the model's default system turn,
    tied embeddings, the model's positions. R1-Distill stand-ins: DeepSeek's tokens and template (the reasoning
    opened in the generation prompt), `<think>` and `</think>` as ordinary added tokens, no ChatML token,
    untied embeddings, 131,072 positions."""
    # a Qwen2.5 base model ends text with <|endoftext|>, turns with <|im_end|>
    qwen = train_tokenizer(texts, VOCAB_SIZE, tags_as_tokens=False,
                           special_tokens={**CHATML_TOKENS, "eos_token": END_OF_TEXT,
                                           "additional_special_tokens": [IM_START, IM_END]})
    for name in MODELS[:3]:
        qwen.chat_template = qwen_template(QWEN_MATH_SYSTEM if "Math" in name else QWEN_SYSTEM)
        save_model(root / name, qwen, tied=True, positions=POSITIONS[name], seed=seed)
    distill = train_tokenizer(texts, VOCAB_SIZE, tags_as_tokens=True, chat_template=R1_DISTILL_TEMPLATE,
                              special_tokens={"bos_token": BOS, "eos_token": EOS, "pad_token": EOS,
                                              "additional_special_tokens": [USER, ASSISTANT]})
    for name in MODELS[3:]:
        save_model(root / name, distill, tied=False, positions=POSITIONS[name], seed=seed)


def build(root: Path) -> dict[str, int]:
    counts = build_datasets(root)
    texts = []
    for path in sorted(root.glob("**/*.parquet")):
        rows = pq.read_table(path).to_pylist()
        texts += [json.dumps(row, ensure_ascii=False)[:TOKENIZER_TEXT_CHARS] for row in rows]
    build_models(root, texts)
    return counts


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
