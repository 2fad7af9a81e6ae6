"""Tiny programming problems with test cases: the tiny config's stand-in for code contests.

Each problem asks for a Python program that reads integers from one line of input and prints an
expression of them, or a function that returns it. The expression is given in symbols
(`a * b + 3`) or in words (`a times b plus 3`, read left to right as Python reads the symbols), so
the model has to turn a statement into a program; three test cases with different inputs catch a
program that prints a constant. Level = number of operations.
"""

import json
import random
from dataclasses import dataclass

VARIABLE_SETS = (("a", "b", "c"), ("x", "y", "z"), ("m", "n", "k"), ("p", "q", "r"))
OPERATORS = {"+": "plus", "-": "minus", "*": "times"}
NUM_TESTS = 3
MAX_INPUT = 20


@dataclass(frozen=True)
class CodeProblem:
    prompt: str
    program: str
    tests: tuple[dict, ...]
    level: int
    steps: tuple[str, ...]  # the worked thinking, one sentence per step, without its full stop

    @property
    def tests_json(self) -> str:
        return json.dumps(list(self.tests))


def _expression(rng: random.Random, level: int, variables: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Operands and operators: `level` operations over one to three variables and constants 1..9."""
    first, second, third = variables
    operands = [first] + [rng.choice([second, str(rng.randint(1, 9))])]
    operands += [rng.choice([third, second, str(rng.randint(1, 9))]) for _ in range(level - 1)]
    rng.shuffle(operands)
    operators = [rng.choice(list(OPERATORS)) for _ in range(level)]
    return operands, operators


def _written(operands: list[str], operators: list[str], in_words: bool = False) -> str:
    """`a * b + 3`, or in words `a times b plus 3`."""
    parts = [operands[0]]
    for operator, operand in zip(operators, operands[1:]):
        parts += [OPERATORS[operator] if in_words else operator, operand]
    return " ".join(parts)


def _value(expression: str, values: dict[str, int]) -> int:
    # The expression is built here from the fixed alphabet above; eval is the reference semantics.
    return eval(expression, {"__builtins__": {}}, dict(values))


def make_code_problem(rng: random.Random, level: int) -> CodeProblem:
    variables = rng.choice(VARIABLE_SETS)
    operands, operators = _expression(rng, level, variables)
    symbols = _written(operands, operators)
    names = [v for v in variables if v in operands]
    in_words = rng.random() < 0.5
    stated = _written(operands, operators, in_words)
    inputs: list[dict[str, int]] = []
    # Distinct inputs, and not all with one output: a program printing a constant must fail.
    while len(inputs) < NUM_TESTS or len({_value(symbols, case) for case in inputs}) == 1:
        if len(inputs) == NUM_TESTS:
            inputs.clear()
        case = {v: rng.randint(0, MAX_INPUT) for v in names}
        if case not in inputs:
            inputs.append(case)
    listed = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)
    integers = "integers" if len(names) > 1 else "integer"
    translate = [f"{stated} is {symbols}"] if in_words else []
    if rng.random() < 0.5:
        prompt = f"Write a Python program that reads the {integers} {listed} from one line and prints {stated}."
        program = f"{', '.join(names)} = map(int, input().split())\nprint({symbols})" if len(names) > 1 \
            else f"{names[0]} = int(input())\nprint({symbols})"
        tests = tuple({"input": " ".join(str(case[v]) for v in names) + "\n", "output": f"{_value(symbols, case)}\n"}
                      for case in inputs)
        steps = [f"The line holds {listed}", *translate]
    else:
        signature = f"f({', '.join(names)})"
        prompt = f"Write a Python function {signature} that returns {stated}."
        program = f"def {signature}:\n    return {symbols}"
        tests = tuple({"assert": f"assert f({', '.join(str(case[v]) for v in names)}) == {_value(symbols, case)}"}
                      for case in inputs)
        steps = [f"f takes {listed}", *translate]
    return CodeProblem(prompt, program, tests, level, tuple(steps))
