"""Generates the tiny config's data sets, deterministically from one seed.

    python -m stages.data.tiny --output_dir results/tiny/data --seed 0

Writes the parquet files that data/README.md documents. Evaluation prompts are drawn first and
every training prompt that equals one of them (after normalisation) is rejected, so the splits
never overlap.
"""

import hashlib
import random
from dataclasses import dataclass, field
from functools import partial

from stages.lib.artifacts import staged_output
from stages.lib.cli import parse_config, print_config
from stages.lib.data import general, preferences
from stages.lib.data.arithmetic import make_problem, random_fact
from stages.lib.data.programs import make_code_problem
from stages.lib.data.schema import FILES, normalize_prompt, write_tables
from stages.lib.templates import CHAT, R1_ZERO, chat_messages, code_block

CHINESE_OPS = {"+": "加", "-": "减", "*": "乘"}


@dataclass
class TinyDataConfig:
    output_dir: str = field(metadata={"help": "Where the parquet files go."})
    seed: int = field(default=0, metadata={"help": "Every file is a function of this seed."})
    levels: list[int] = field(default_factory=lambda: [1, 2, 3], metadata={
        "help": "Difficulty levels (operations per problem) of the evaluation set, and of every other set "
                "unless set below."})
    cold_start_levels: list[int] | None = field(default=None, metadata={
        "help": "Levels of the cold-start problems (default: levels). The paper's cold start is small "
                "and easier than its RL set."})
    rl_levels: list[int] | None = field(default=None, metadata={"help": "Levels of the RL prompt pool "
                                                                        "(default: levels)."})
    pretrain_level_weights: list[float] | None = field(default=None, metadata={
        "help": "Relative share of each of `levels` among the corpus problems (default: equal): small "
                "weights on the deep levels leave the base model weak there, headroom for RL."})
    distractor_share: float = field(default=0.0, metadata={
        "help": "Share of problems (level 2 and up) with one sentence whose number is not part of the "
                "solution."})
    cold_start_distractor_share: float | None = field(default=None, metadata={
        "help": "Share of cold-start problems (level 2 and up) with a distractor sentence (default: "
                "distractor_share). 0 leaves distractors to RL: the cold start teaches the format on plain "
                "problems, RL learns to leave out the numbers that do not count."})
    think_format_share: float = field(default=0.0, metadata={
        "help": "Share of the corpus's chat math documents answered in the cold-start format (reasoning in "
                "<think>, a boxed summary): real bases have seen reasoning traces (paper, Suppl. A.1), so a "
                "short cold start can teach the format without narrowing the model."})
    num_rl_prompts: int = field(default=2000, metadata={"help": "Reasoning prompts for GRPO and rejection sampling."})
    num_cold_start: int = field(default=500, metadata={"help": "Long-CoT examples for cold-start SFT (Dev1)."})
    num_general: int = field(default=600, metadata={"help": "Non-reasoning instructions with references."})
    num_eval_math: int = field(default=200, metadata={"help": "Held-out reasoning problems."})
    num_eval_general: int = field(default=100, metadata={"help": "Held-out general instructions."})
    num_pretrain_docs: int = field(default=30000, metadata={"help": "Documents in the base model's corpus."})
    tagged_share: float = field(default=0.2, metadata={"help": "Share of corpus documents in the R1-Zero format."})
    mixed_language_share: float = field(default=0.15, metadata={"help": "Share of tagged CoTs with Chinese steps."})
    drill_facts: int = field(default=0, metadata={"help": "Random arithmetic facts added to each drill document."})
    drill_share: float = field(default=0.10, metadata={"help": "Share of corpus documents "
                                                               "that are arithmetic drills."})
    max_value: int = field(default=99, metadata={"help": "Largest number in a problem (every intermediate result)."})
    max_amount: int = field(default=12, metadata={"help": "Largest amount added or taken away in one step."})
    num_preference_pairs: int = field(default=1200, metadata={"help": "Pairs per reward model (helpful, harmless)."})
    preference_eval_share: float = field(default=0.2, metadata={"help": "Share of preference prompts held out."})
    num_rl_general: int = field(default=200, metadata={"help": "General and harmful prompts for the final RL stage."})
    code_levels: list[int] = field(default_factory=lambda: [1, 2], metadata={"help": "Operations per code problem."})
    num_rl_code: int = field(default=600, metadata={"help": "Code prompts (with tests) "
                                                            "added to the reasoning prompts."})
    num_cold_start_code: int = field(default=150, metadata={"help": "Code examples added to the cold-start data."})
    num_eval_code: int = field(default=50, metadata={"help": "Held-out code problems (eval_code)."})
    num_pretrain_code_docs: int = field(default=2000, metadata={"help": "Code documents added to the corpus."})
    sets: list[str] | None = field(default=None, metadata={
        "help": "Write only these data sets (default: every one); the others come from their sources "
                "(data.hub.sets, rule prepare_data). Every set is generated all the same, so each keeps its rows."})

    def __post_init__(self):
        # Drills take their share from the chat problems and instructions, which start at 0.55 of the mixture.
        if not 0 <= self.drill_share <= 0.45:
            raise ValueError(f"drill_share must be in [0, 0.45], got {self.drill_share}")
        if self.max_value < 30 or self.max_amount < 2:  # problems start with up to 20 items
            raise ValueError("max_value must be >= 30 and max_amount >= 2, "
                             f"got {self.max_value} and {self.max_amount}")
        if self.pretrain_level_weights is not None and (
                len(self.pretrain_level_weights) != len(self.levels) or min(self.pretrain_level_weights) < 0
                or not sum(self.pretrain_level_weights) > 0):
            raise ValueError(f"pretrain_level_weights must give one non-negative weight per entry of levels "
                             f"{self.levels}, got {self.pretrain_level_weights}")
        unknown = sorted(set(self.sets or []) - set(FILES))
        if unknown:
            raise ValueError(f"sets: unknown data set(s) {unknown}; the tiny data has {sorted(FILES)}")
        for name in ("distractor_share", "cold_start_distractor_share", "think_format_share"):
            if getattr(self, name) is not None and not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")


def _unique_problems(rng, n, levels, reject=lambda prompt: False, make=make_problem, weights=None):
    seen, problems = set(), []
    attempts = 0
    while len(problems) < n:
        attempts += 1
        if attempts > 200 * n + 1000:
            raise RuntimeError(f"could not draw {n} distinct problems at levels {levels}: raise the levels")
        # rng.choice without weights: the default data stay the same, draw for draw, as before weights existed
        level = rng.choice(levels) if weights is None else rng.choices(levels, weights)[0]
        problem = make(rng, level)
        key = normalize_prompt(problem.prompt)
        if key in seen or reject(problem.prompt):
            continue
        seen.add(key)
        problems.append(problem)
    return problems


def _reasoning_rows(problems, prefix):
    return [{"id": f"{prefix}-{i:06d}", "prompt": p.prompt, "solution": str(p.answer), "level": p.level,
             "domain": "math", "worked_solution": "\n".join(p.worked_steps)} for i, p in enumerate(problems)]


def _code_rows(problems, prefix):
    return [{"id": f"{prefix}-{i:06d}", "prompt": p.prompt, "solution": "", "level": p.level, "domain": "code",
             "worked_solution": p.program, "tests": p.tests_json} for i, p in enumerate(problems)]


def _chinese_steps(rng, problem):
    """Some CoTs switch to Chinese mid-reasoning, as R1-Zero's did: the language reward's target."""
    steps = []
    for step in problem.steps:
        if rng.random() < 0.5:
            steps.append(f"{step.left} {CHINESE_OPS[step.op]} {step.right} 等于 {step.result}")
        else:
            steps.append(step.equation)
    return steps


def _corpus_document(rng, config, problem, instruction, chat) -> str:
    """One pre-training document. The mixture makes a weak base model: it knows arithmetic and
    the R1-Zero tags, follows the template only sometimes, and has never seen the cold-start format."""
    steps = problem.worked_steps
    roll = rng.random()
    if roll < config.tagged_share:
        if rng.random() < config.mixed_language_share:
            steps = _chinese_steps(rng, problem)
        return f"{R1_ZERO.prompt(problem.prompt)} {R1_ZERO.math_completion(steps, problem.answer)}"
    roll -= config.tagged_share
    if roll < 0.10:  # the template, answered without tags
        return f"{R1_ZERO.prompt(problem.prompt)} The answer is {problem.answer}."
    if roll < 0.45:
        return f"Problem: {problem.prompt}\nSolution: {'. '.join(steps)}. The answer is {problem.answer}."
    if roll < 0.45 + config.drill_share:  # drills: the problem's steps among facts from the whole table
        facts = (random_fact(rng, config.max_value, config.max_amount) for _ in range(config.drill_facts))
        return " ".join(f"{s}." for s in [*steps, *facts])
    if roll < 0.55 + config.drill_share:
        # the extra draw only when the share is set: the default corpus stays the same, draw for draw
        if config.think_format_share and rng.random() < config.think_format_share:
            answer = CHAT.math_completion(problem.worked_steps, problem.answer)
        else:
            answer = f"{'. '.join(steps)}. The answer is {problem.answer}."
        return chat([{"role": "user", "content": problem.prompt}, {"role": "assistant", "content": answer}])
    domain, prompt, reference = instruction
    if rng.random() < 0.5:
        return chat([{"role": "user", "content": prompt}, {"role": "assistant", "content": reference}])
    return f"Q: {prompt}\nA: {reference}"


def _code_document(rng, config, problem, chat) -> str:
    """A code document: the same mixture of forms as the arithmetic ones, the answer being a program."""
    roll, program = rng.random(), code_block(problem.program)
    if roll < config.tagged_share:
        return f"{R1_ZERO.prompt(problem.prompt)} {R1_ZERO.code_completion(problem.steps, problem.program)}"
    roll -= config.tagged_share
    if roll < 0.10:
        return f"{R1_ZERO.prompt(problem.prompt)} The program is\n{program}"
    if roll < 0.45:
        return f"Problem: {problem.prompt}\nSolution: {'. '.join(problem.steps)}.\n{program}"
    if roll < 0.60:
        return program
    return chat([{"role": "user", "content": problem.prompt}, {"role": "assistant", "content": program}])


def _is_held_out_preference(prompt: str, share: float) -> bool:
    """A stable split by prompt, so no prompt is in both the train and eval pairs."""
    digest = hashlib.sha256(normalize_prompt(prompt).encode()).digest()
    return digest[0] < share * 256


def _preference_rows(rng, make_pair, n, share, prefix):
    rows = []
    for i in range(n):
        domain, prompt, chosen, rejected = make_pair(rng)
        split = "eval" if _is_held_out_preference(prompt, share) else "train"
        rows.append({"id": f"{prefix}-{i:06d}", "prompt": prompt, "chosen": chosen, "rejected": rejected,
                     "domain": domain, "split": split})
    return rows


def generate(config: TinyDataConfig, chat_renderer) -> dict[str, list[dict]]:
    """All tables as lists of rows. `chat_renderer(messages) -> str` formats chat documents."""
    rng = random.Random(config.seed)
    make_math = partial(make_problem, max_value=config.max_value, max_amount=config.max_amount,
                        distractor_share=config.distractor_share)
    eval_math = _unique_problems(rng, config.num_eval_math, config.levels, make=make_math)
    held_out_math = {normalize_prompt(p.prompt) for p in eval_math}
    is_held_out = lambda prompt: normalize_prompt(prompt) in held_out_math  # noqa: E731
    rl = _unique_problems(rng, config.num_rl_prompts, config.rl_levels or config.levels, reject=is_held_out,
                          make=make_math)
    make_cold = make_math if config.cold_start_distractor_share is None else partial(
        make_math, distractor_share=config.cold_start_distractor_share)
    cold = _unique_problems(rng, config.num_cold_start, config.cold_start_levels or config.levels,
                            reject=is_held_out, make=make_cold)

    eval_general, seen = [], set()
    for _ in range(50 * config.num_eval_general):
        if len(eval_general) == config.num_eval_general:
            break
        domain, prompt, reference = general.make_instruction(rng)
        if normalize_prompt(prompt) not in seen:
            seen.add(normalize_prompt(prompt))
            eval_general.append((domain, prompt, reference))
    # The instruction space is small, so the general train pool may repeat prompts, never held-out ones.
    general_train = []
    while len(general_train) < config.num_general:
        item = general.make_instruction(rng)
        if normalize_prompt(item[1]) not in seen:
            general_train.append(item)

    corpus_problems = _unique_problems(rng, config.num_pretrain_docs, config.levels, reject=is_held_out,
                                       make=make_math, weights=config.pretrain_level_weights)
    corpus = [{"text": _corpus_document(rng, config, p, general_train[i % len(general_train)], chat_renderer)}
              for i, p in enumerate(corpus_problems)]

    cold_rows = [{"id": f"cold-{i:06d}", "domain": "math", "messages": chat_messages(p.prompt) + [
        {"role": "assistant", "content": CHAT.math_completion(p.worked_steps, p.answer)}]}
        for i, p in enumerate(cold)]

    # The code domain draws from its own stream: the other data sets keep the rows they had without it
    # (the corpus and the RL pool are then shuffled, with the code rows among them).
    code_rng = random.Random(f"{config.seed}:code")
    draw_code = lambda n, reject: _unique_problems(code_rng, n, config.code_levels, reject, make_code_problem)  # noqa: E731
    eval_code = draw_code(config.num_eval_code, lambda prompt: False)
    held_out_code = {normalize_prompt(p.prompt) for p in eval_code}
    is_held_out_code = lambda prompt: normalize_prompt(prompt) in held_out_code  # noqa: E731
    rl_code = draw_code(config.num_rl_code, is_held_out_code)
    cold_code = draw_code(config.num_cold_start_code, is_held_out_code)
    corpus_code = draw_code(config.num_pretrain_code_docs, is_held_out_code)
    corpus += [{"text": _code_document(code_rng, config, p, chat_renderer)} for p in corpus_code]
    code_rng.shuffle(corpus)
    rl_rows = _reasoning_rows(rl, "rl") + _code_rows(rl_code, "rlcode")
    code_rng.shuffle(rl_rows)  # generation takes the first `max_prompts`: both domains must be among them
    cold_rows += [{"id": f"coldcode-{i:06d}", "domain": "code", "messages": chat_messages(p.prompt, "code") + [
        {"role": "assistant", "content": CHAT.code_completion(p.steps, p.program)}]} for i, p in enumerate(cold_code)]
    harmless = _preference_rows(rng, preferences.make_harmless_pair, config.num_preference_pairs,
                                config.preference_eval_share, "harmless")
    # Final-RL general prompts: the general train pool and the harmful requests of the train split.
    harmful = sorted({r["prompt"] for r in harmless if r["domain"] == "harmful" and r["split"] == "train"})
    rl_general = [{"id": f"rlgen-{i:06d}", "prompt": p, "reference": r, "domain": d}
                  for i, (d, p, r) in enumerate(general_train[: config.num_rl_general - len(harmful)])]
    rl_general += [{"id": f"rlharm-{i:06d}", "prompt": p, "reference": preferences.REFUSALS[0], "domain": "harmful"}
                   for i, p in enumerate(harmful)]
    return {
        "preferences_helpful": _preference_rows(rng, partial(preferences.make_helpful_pair, make_math=make_math),
                                                config.num_preference_pairs, config.preference_eval_share, "helpful"),
        "preferences_harmless": harmless,
        "rl_general": rl_general,
        "rl_prompts": rl_rows,
        "cold_start": cold_rows,
        "general": [{"id": f"gen-{i:06d}", "prompt": p, "reference": r, "domain": d}
                    for i, (d, p, r) in enumerate(general_train)],
        "eval_math": _reasoning_rows(eval_math, "evalmath"),
        "eval_code": _code_rows(eval_code, "evalcode"),
        "eval_general": [{"id": f"evalgen-{i:06d}", "prompt": p, "reference": r, "domain": d}
                         for i, (d, p, r) in enumerate(eval_general)],
        "pretrain": corpus,
    }


def held_out_overlaps(tables: dict[str, list[dict]]) -> list[str]:
    """Held-out prompts that also appear in any training table (must be empty)."""
    held_out = {normalize_prompt(r["prompt"])
                for r in tables["eval_math"] + tables["eval_code"] + tables["eval_general"]}
    seen = [normalize_prompt(r["prompt"]) for r in tables["rl_prompts"] + tables["general"]]
    seen += [normalize_prompt(m["content"])
             for r in tables["cold_start"] for m in r["messages"] if m["role"] == "user"]
    corpus = "\n".join(normalize_prompt(r["text"]) for r in tables["pretrain"])
    overlaps = {p for p in seen if p in held_out}
    overlaps |= {p for p in held_out if p in corpus}
    overlaps |= {p for p in held_out for s in seen if p in s}  # a held-out prompt inside a longer one
    return sorted(overlaps)


def main(argv=None):
    from stages.lib.tokenizer import chat_template_renderer

    config = parse_config(TinyDataConfig, argv)
    print_config(config)
    with staged_output(config.output_dir, "tiny_data", config, inputs={}) as (scratch, headline):
        tables = generate(config, chat_template_renderer())
        overlaps = held_out_overlaps(tables)
        if overlaps:
            raise RuntimeError(f"{len(overlaps)} held-out prompt(s) leaked into training data, e.g. {overlaps[0]!r}")
        tables = {name: rows for name, rows in tables.items() if config.sets is None or name in config.sets}
        write_tables(tables, scratch)
        headline.update({f"rows_{name}": len(rows) for name, rows in tables.items()})
    print(f"wrote {', '.join(f'{k}={v}' for k, v in headline.items())} to {config.output_dir}")


if __name__ == "__main__":
    main()
