"""Multi-step arithmetic word problems with integer answers and worked solutions.

These are the tiny config's stand-in for MATH/AIME: every problem is verifiable (an integer gold
answer), comes with a step-by-step worked solution (one equation per step), and has a difficulty
level equal to its number of operations.
"""

import random
from dataclasses import dataclass

NAMES = [
    ("Ana", "she"), ("Ben", "he"), ("Carla", "she"), ("Dev", "he"), ("Emma", "she"), ("Farid", "he"),
    ("Gita", "she"), ("Hugo", "he"), ("Ines", "she"), ("Jon", "he"), ("Kira", "she"), ("Leo", "he"),
    ("Mia", "she"), ("Noah", "he"), ("Olga", "she"), ("Pablo", "he"), ("Rosa", "she"), ("Sam", "he"),
    ("Tara", "she"), ("Umar", "he"), ("Vera", "she"), ("Will", "he"), ("Yara", "she"), ("Zeno", "he"),
]
ITEMS = [
    "apples", "pencils", "stickers", "marbles", "cookies", "books", "coins", "cards", "shells",
    "stamps", "buttons", "candies", "flowers", "toys", "balloons", "rocks",
]
CONTAINERS = ["boxes", "bags", "packs", "jars", "baskets"]
FRIENDS = ["a friend", "a neighbour", "the teacher", "a cousin", "a classmate", "grandma"]

MAX_VALUE = 99  # every intermediate result stays in 0..MAX_VALUE
MAX_AMOUNT = 12  # largest amount added or taken away in one step


@dataclass(frozen=True)
class Step:
    """One operation: its sentence in the problem and its equation in the worked solution."""

    sentence: str
    left: int
    op: str
    right: int
    result: int

    @property
    def equation(self) -> str:
        return f"{self.left} {self.op} {self.right} = {self.result}"


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: int
    level: int
    steps: tuple[Step, ...]

    @property
    def worked_steps(self) -> list[str]:
        return [step.equation for step in self.steps]


def _add_step(rng: random.Random, total: int, pronoun: str, item: str, max_value: int, max_amount: int) -> Step | None:
    amount = rng.randint(1, max_amount)
    if total + amount > max_value:
        return None
    sentence = rng.choice([
        f"{pronoun.capitalize()} gets {amount} more {item}.",
        f"{pronoun.capitalize()} finds {amount} more {item}.",
        f"Then {rng.choice(FRIENDS)} gives {'her' if pronoun == 'she' else 'him'} {amount} {item}.",
        f"{pronoun.capitalize()} buys {amount} {item}.",
    ])
    return Step(sentence, total, "+", amount, total + amount)


def _subtract_step(rng: random.Random, total: int, pronoun: str, item: str, max_value: int,
                   max_amount: int) -> Step | None:
    if total < 2:
        return None
    amount = rng.randint(1, min(total - 1, max_amount))
    sentence = rng.choice([
        f"{pronoun.capitalize()} gives {amount} {item} to {rng.choice(FRIENDS)}.",
        f"{pronoun.capitalize()} loses {amount} {item}.",
        f"Then {pronoun} sells {amount} {item}.",
    ])
    return Step(sentence, total, "-", amount, total - amount)


def _multiply_step(rng: random.Random, total: int, pronoun: str, item: str, max_value: int,
                   max_amount: int) -> Step | None:
    factor = rng.randint(2, 4)
    if total * factor > max_value or total == 0:
        return None
    word = {2: "twice", 3: "three times", 4: "four times"}[factor]
    sentence = f"Then {pronoun} ends up with {word} as many {item} as before."
    return Step(sentence, total, "*", factor, total * factor)


def _buy_containers_step(rng: random.Random, total: int, pronoun: str, item: str, max_value: int,
                         max_amount: int) -> list[Step] | None:
    count, per = rng.randint(2, 5), rng.randint(2, 6)
    bought = count * per
    if total + bought > max_value:
        return None
    container = rng.choice(CONTAINERS)
    sentence = f"{pronoun.capitalize()} buys {count} {container} with {per} {item} in each."
    # Two equations for one sentence: the product, then the sum.
    return [Step(sentence, count, "*", per, bought), Step("", total, "+", bought, total + bought)]


STEP_KINDS = (_add_step, _subtract_step, _multiply_step)


def _distractor(rng: random.Random, name: str, pronoun: str, item: str) -> str:
    """A sentence with a number that changes nothing: the solver must leave it out of the steps."""
    other = rng.choice([n for n, _ in NAMES if n != name])
    other_item = rng.choice([i for i in ITEMS if i != item])
    amount = rng.randint(2, 20)
    return rng.choice([
        f"{other} has {amount} {item}.",
        f"{other} has {amount} {other_item}.",
        f"{pronoun.capitalize()} sees {amount} {other_item} in a shop.",
    ])


def make_problem(rng: random.Random, level: int, max_value: int = MAX_VALUE, max_amount: int = MAX_AMOUNT,
                 distractor_share: float = 0.0) -> Problem:
    """A problem with `level` operations, every intermediate result in 0..max_value. With
    `distractor_share`, that share of the problems of level 2 and up carries one sentence whose number
    is not part of the solution."""
    name, pronoun = rng.choice(NAMES)
    item = rng.choice(ITEMS)
    while True:
        total = rng.randint(2, 20)
        sentences = [f"{name} has {total} {item}."]
        steps: list[Step] = []
        while len(steps) < level:
            if level - len(steps) >= 2 and rng.random() < 0.25:
                pair = _buy_containers_step(rng, total, pronoun, item, max_value, max_amount)
                if pair is None:
                    break
                sentences.append(pair[0].sentence)
                steps.extend(pair)
            else:
                # Multiplication is rarer and never the first operation of an easy problem.
                kinds = STEP_KINDS if level >= 2 else STEP_KINDS[:2]
                step = rng.choice(kinds)(rng, total, pronoun, item, max_value, max_amount)
                if step is None:
                    break
                sentences.append(step.sentence)
                steps.append(step)
            total = steps[-1].result
        if len(steps) == level:
            if distractor_share and level >= 2 and rng.random() < distractor_share:
                sentences.insert(rng.randint(1, len(sentences)), _distractor(rng, name, pronoun, item))
            sentences.append(f"How many {item} does {name} have now?")
            return Problem(" ".join(sentences), total, level, tuple(steps))


def random_fact(rng: random.Random, max_value: int = MAX_VALUE, max_amount: int = MAX_AMOUNT) -> str:
    """One equation of the kind the problems' steps use, drawn uniformly over its operands: the
    arithmetic table the tiny model has to learn, beyond the facts its problems happen to contain."""
    kind = rng.choice("+-*x")
    if kind == "+":
        right = rng.randint(1, max_amount)
        left = rng.randint(0, max_value - right)
        return f"{left} + {right} = {left + right}"
    if kind == "-":
        left = rng.randint(2, max_value)
        right = rng.randint(1, min(left - 1, max_amount))
        return f"{left} - {right} = {left - right}"
    if kind == "*":
        factor = rng.randint(2, 4)
        left = rng.randint(1, max_value // factor)
        return f"{left} * {factor} = {left * factor}"
    count, per = rng.randint(2, 5), rng.randint(2, 6)
    return f"{count} * {per} = {count * per}"


def solve(problem_steps: list[str]) -> int:
    """Replays a worked solution's equations and returns the last result (used by tests)."""
    value = None
    for equation in problem_steps:
        left, result = equation.split(" = ")
        a, op, b = left.split(" ")
        value = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        if value != int(result):
            raise ValueError(f"wrong step: {equation}")
    return value
