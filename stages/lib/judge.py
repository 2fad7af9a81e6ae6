"""A generative judge for answers no rule can check: a model reads the question, the reference answer
and the response's final answer and replies CORRECT or INCORRECT (the paper fed ground truth and
prediction to DeepSeek-V3 for part of its data). How good the verdicts are is the chosen model's
matter; this module only asks and parses.

    judge = Judge(load_generator(model_path, backend="vllm"))
    verdicts = judge.judge(questions, references, predictions)  # True, False, or None: not judged

A reply other than one verdict word (case aside, a full stop allowed) is not judged: the caller
counts it and drops the candidate, since a guess would put unverified answers into the SFT data.
"""

import re

from stages.lib.generation import SamplingSettings

JUDGE_INSTRUCTION = """You grade a response to a question against the reference answer.

Question:
{question}

Reference answer:
{reference}

The response's final answer:
{prediction}

Does the response's final answer mean the same as the reference answer? Reply with one word: CORRECT or INCORRECT."""
VERDICT = re.compile(r"\s*(CORRECT|INCORRECT)\.?\s*", re.IGNORECASE)
MAX_PREDICTION_CHARS = 4000  # a final answer longer than this is cut from the front: its end is the answer


def parse_verdict(reply: str) -> bool | None:
    match = VERDICT.fullmatch(reply)
    return None if match is None else match.group(1).upper() == "CORRECT"


class Judge:
    def __init__(self, generator, max_new_tokens: int = 8, seed: int = 0):
        self.generator = generator
        self.settings = SamplingSettings(num_samples=1, temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens,
                                         seed=seed)

    def prompt(self, question: str, reference: str, prediction: str) -> str:
        """The instruction in the judge's own chat template (a model without one gets it as plain text)."""
        text = JUDGE_INSTRUCTION.format(question=question.strip(), reference=reference.strip(),
                                        prediction=prediction.strip()[-MAX_PREDICTION_CHARS:])
        tokenizer = self.generator.tokenizer
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                 add_generation_prompt=True)
        return text

    def replies(self, questions: list[str], references: list[str], predictions: list[str]) -> list[str]:
        prompts = [self.prompt(q, r, p) for q, r, p in zip(questions, references, predictions)]
        return [samples[0].text for samples in self.generator.generate(prompts, self.settings)]

    def judge(self, questions: list[str], references: list[str], predictions: list[str]) -> list[bool | None]:
        return [parse_verdict(reply) for reply in self.replies(questions, references, predictions)]
