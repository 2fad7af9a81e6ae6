"""Response formats: the recipe's two ways of talking to a model, one object each.

- `r1_zero`: the paper's raw-text template for a base model (no chat template), answered as
  `<think> reasoning </think> <answer> answer </answer>`.
- `chat`: the tokenizer's chat template with DeepSeek's math instruction, answered as
  `<think>\nreasoning\n</think>\n\nreadable summary with \\boxed{answer}` (Dev1 onward).

A stage looks its format up once from the config's `template` (`response_format(name)`) and passes the
object on: it renders the prompt, says where generation stops, where the answer lives and whether a
completion has the format's shape. What an answer or a program is (boxed LaTeX, a fenced block) is
the rewards' business (stages/lib/rewards/answers.py, code.py); they read it from `answer_text`.
"""

import re
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "data" / "templates"
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
CODE_INSTRUCTION = "Please reason step by step, and put your final program in a ```python code block."
# Multiple choice (GPQA): lettered options, the letter asked for in a box (a data source writes it in the prompt)
CHOICE_LETTERS = "ABCD"
CHOICE_INSTRUCTION = "Answer with the letter of the correct option within \\boxed{}."
# Reasoning domains get their instruction after the question; general prompts go as they are.
INSTRUCTIONS = {"math": MATH_INSTRUCTION, "code": CODE_INSTRUCTION}
THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE = "<think>", "</think>", "<answer>", "</answer>"
THINK_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
REASONING = re.compile(rf"{THINK_OPEN}(.*?)(?:{THINK_CLOSE}|$)", re.DOTALL)
OPENED_REASONING = re.compile(rf"{THINK_OPEN}\s*$")


def reasoning_prefill(prompt: str) -> str:
    """The reasoning block a chat template opens for the model, or "": R1-Distill's generation prompt ends
    with `<think>\n`, so its completions hold only `</think>`. The prefill is part of the response as the
    model means it; it is put back in front of every completion before it is parsed, so that the format
    and a completion cut mid-reasoning are judged alike for every model."""
    match = OPENED_REASONING.search(prompt)
    return match.group() if match else ""


def reasoning_of(completion: str) -> str:
    """The chain of thought: the first <think> block, or the whole completion if it has none."""
    match = REASONING.search(completion)
    return match.group(1) if match else completion


def summary_of(completion: str) -> str:
    """The text after the reasoning block: what a reader sees (and what the helpful RM judges).
    A reasoning block that never closes leaves no summary."""
    end = completion.rfind(THINK_CLOSE)
    if end == -1:
        return "" if THINK_OPEN in completion else completion
    return completion[end + len(THINK_CLOSE):]


def chat_messages(question: str, domain: str = "math") -> list[dict]:
    instruction = INSTRUCTIONS.get(domain)
    return [{"role": "user", "content": f"{question} {instruction}" if instruction else question}]


def code_block(program: str, language: str = "python") -> str:
    return f"```{language}\n{program}\n```"


class ResponseFormat:
    """How a model is prompted and how its completion is laid out."""

    name: str
    # Generation stops right after these strings (kept in the completion).
    stop_strings: tuple[str, ...] = ()
    # Each tag's count in a well-formed completion (partial credit: the tag_count reward).
    wanted_tags: dict[str, int]
    # The answer block's own text is the answer when it boxes nothing (R1-Zero writes `<answer> 4 </answer>`).
    bare_answer: bool = False
    shape: re.Pattern
    # The prompt goes through the tokenizer's chat template (else it is raw text).
    chat_template: bool = False
    # How to prompt a model trained in this format, for its model card.
    usage: str

    def prompt(self, question: str, domain: str = "math"):
        """A prompt as TRL takes it: raw text, or a conversation TRL renders with the chat template."""
        raise NotImplementedError

    def render(self, question: str, tokenizer=None, domain: str = "math") -> str:
        """The exact text a model sees before it starts its completion."""
        raise NotImplementedError

    def answer_text(self, completion: str) -> str | None:
        """The part of a completion that holds its final answer or program; None when there is none."""
        raise NotImplementedError

    def math_completion(self, steps: list[str], answer) -> str:
        raise NotImplementedError

    def code_completion(self, steps: list[str], program: str) -> str:
        raise NotImplementedError

    def tag_counts(self, completion: str) -> dict[str, int]:
        return {tag: completion.count(tag) for tag in THINK_TAGS}

    def tag_score(self, completion: str) -> float:
        """The share of tags that appear exactly as often as the format wants (once or never)."""
        return sum(completion.count(tag) == n for tag, n in self.wanted_tags.items()) / len(self.wanted_tags)

    def is_well_formatted(self, completion: str) -> bool:
        """Every tag as often as wanted, the shape matched, and no block of it empty."""
        if self.tag_counts(completion) != self.wanted_tags:
            return False
        match = self.shape.fullmatch(completion)
        return bool(match and all(part.strip() for part in match.groups()))


class R1ZeroFormat(ResponseFormat):
    """`<think> reasoning </think> <answer> answer </answer>`, each tag once, nothing after."""

    name = "r1_zero"
    # R1-Zero reproductions stop at </answer>: a base model otherwise keeps going, e.g. copying the
    # template's own tags.
    stop_strings = (ANSWER_CLOSE,)
    wanted_tags = dict.fromkeys(THINK_TAGS, 1)
    bare_answer = True
    shape = re.compile(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", re.DOTALL)
    usage = ("The R1-Zero raw-text template (`data/templates/r1_zero.txt`, no chat template); the answer comes as "
             "`<think> ... </think> <answer> ... </answer>`. Stop at `</answer>`.")

    @staticmethod
    def template() -> str:
        return (TEMPLATE_DIR / "r1_zero.txt").read_text().strip()

    def prompt(self, question, domain="math"):
        return self.template().format(question=question)

    def render(self, question, tokenizer=None, domain="math"):
        return self.prompt(question, domain)

    def answer_text(self, completion):
        """The last closed <answer> block."""
        end = completion.rfind(ANSWER_CLOSE)
        start = completion.rfind(ANSWER_OPEN, 0, max(end, 0))
        if end == -1 or start == -1:
            return None
        return completion[start + len(ANSWER_OPEN): end]

    def math_completion(self, steps, answer):
        return f"<think> {' '.join(s + '.' for s in steps)} </think> <answer> {answer} </answer>"

    def code_completion(self, steps, program):
        """A code answer is its fenced program."""
        return self.math_completion(steps, code_block(program))


class ChatFormat(ResponseFormat):
    """`<think> reasoning </think>` then a non-empty summary, no answer tags."""

    name = "chat"
    wanted_tags = {THINK_OPEN: 1, THINK_CLOSE: 1, ANSWER_OPEN: 0, ANSWER_CLOSE: 0}
    shape = re.compile(r"\s*<think>(.*?)</think>(.*)", re.DOTALL)
    chat_template = True
    usage = ("The tokenizer's chat template with no system turn of ours (Qwen2.5's template then writes its default\n"
             "one), the question followed by the instruction; the\n"
             "response is `<think>` reasoning `</think>` and a summary with the answer in `\\boxed{}`. The paper "
             "samples\nat temperature 0.6, top-p 0.95.")

    def prompt(self, question, domain="math"):
        return chat_messages(question, domain)

    def render(self, question, tokenizer=None, domain="math"):
        if tokenizer is None:
            raise ValueError("the chat template needs the model's tokenizer")
        return tokenizer.apply_chat_template(chat_messages(question, domain), tokenize=False,
                                             add_generation_prompt=True)

    def answer_text(self, completion):
        """The summary: a boxed answer inside the reasoning is thinking, not the answer."""
        return summary_of(completion)

    def math_completion(self, steps, answer):
        """Cold-start format: reasoning in <think>, then a readable summary with the boxed answer."""
        reasoning = "\n".join(steps)
        return f"<think>\n{reasoning}\n</think>\n\nThe answer is \\boxed{{{answer}}}."

    def code_completion(self, steps, program):
        """Reasoning in <think>, then the program as the summary."""
        reasoning = "\n".join(f"{step}." for step in steps)
        return f"<think>\n{reasoning}\n</think>\n\n{code_block(program)}"


R1_ZERO, CHAT = R1ZeroFormat(), ChatFormat()
FORMATS = {fmt.name: fmt for fmt in (R1_ZERO, CHAT)}
TEMPLATES = tuple(FORMATS)


def response_format(template: "str | ResponseFormat") -> ResponseFormat:
    """The format a config's `template` names (an object passes through)."""
    if isinstance(template, ResponseFormat):
        return template
    try:
        return FORMATS[template]
    except KeyError:
        raise ValueError(f"unknown prompt template {template!r}; expected one of {TEMPLATES}") from None
