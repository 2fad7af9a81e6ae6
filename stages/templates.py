"""Prompt templates and response formats: the recipe's two ways of talking to a model.

- `r1_zero`: the paper's raw-text template for a base model (no chat template), answered as
  `<think> reasoning </think> <answer> answer </answer>`.
- `chat`: the tokenizer's chat template with DeepSeek's math instruction, answered as
  `<think>\nreasoning\n</think>\n\nreadable summary with \\boxed{answer}` (Dev1 onward).
"""

from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "data" / "templates"
TEMPLATES = ("r1_zero", "chat")
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
CODE_INSTRUCTION = "Please reason step by step, and put your final program in a ```python code block."
# Reasoning domains get their instruction after the question; general prompts go as they are.
INSTRUCTIONS = {"math": MATH_INSTRUCTION, "code": CODE_INSTRUCTION}
THINK_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


# Generation stops right after these strings (kept in the completion). R1-Zero reproductions stop
# at </answer>: a base model otherwise keeps going, e.g. copying the template's own tags.
STOP_STRINGS = {"r1_zero": ("</answer>",), "chat": ()}


def r1_zero_template() -> str:
    return (TEMPLATE_DIR / "r1_zero.txt").read_text().strip()


def r1_zero_prompt(question: str) -> str:
    return r1_zero_template().format(question=question)


def chat_messages(question: str, domain: str = "math") -> list[dict]:
    instruction = INSTRUCTIONS.get(domain)
    return [{"role": "user", "content": f"{question} {instruction}" if instruction else question}]


def training_prompt(template: str, question: str, domain: str = "math"):
    """A prompt as TRL takes it: raw text for the R1-Zero template, a conversation for chat (TRL
    applies the tokenizer's chat template)."""
    return r1_zero_prompt(question) if template == "r1_zero" else chat_messages(question, domain)


def render_prompt(template: str, question: str, tokenizer=None, domain: str = "math") -> str:
    """The exact text a model sees before it starts its completion."""
    if template == "r1_zero":
        return r1_zero_prompt(question)
    if template == "chat":
        if tokenizer is None:
            raise ValueError("the chat template needs the model's tokenizer")
        return tokenizer.apply_chat_template(chat_messages(question, domain), tokenize=False,
                                             add_generation_prompt=True)
    raise ValueError(f"unknown prompt template {template!r}; expected one of {TEMPLATES}")


def think_answer_completion(steps: list[str], answer) -> str:
    """R1-Zero format (a code answer is its fenced program)."""
    return f"<think> {' '.join(s + '.' for s in steps)} </think> <answer> {answer} </answer>"


def think_summary_completion(steps: list[str], answer) -> str:
    """Cold-start format: reasoning in <think>, then a readable summary with the boxed answer."""
    reasoning = "\n".join(steps)
    return f"<think>\n{reasoning}\n</think>\n\nThe answer is \\boxed{{{answer}}}."


def code_block(program: str, language: str = "python") -> str:
    return f"```{language}\n{program}\n```"


def think_code_completion(steps: list[str], program: str) -> str:
    """Cold-start format of a code answer: reasoning in <think>, then the program as the summary."""
    reasoning = "\n".join(f"{step}." for step in steps)
    return f"<think>\n{reasoning}\n</think>\n\n{code_block(program)}"
