"""Step consistency: is every computation written out in a chain of thought right?

A sampled response can reach the gold answer through a wrong step (`10 - 7 = 4`, then `4 - 1 = 2`
when the answer is 2 for another reason), and SFT on it teaches the wrong fact. The paper's rejection
sampling has DeepSeek-V3 judge such responses; this is the rule-based analogue for computations:
every equation between plain numbers (`12 + 5 = 17`, `3 × 4 = 12`, `7 / 2 = 3.5`, `2 + 3 * 4 = 14`)
must hold. Anything symbolic (`x + 2 = 5`, `2^3 + 1 = 9`, `(a + 1) * 2 = 6`) is left alone, so a
real model's reasoning is checked where it computes and passed where it reasons. A result written
with d decimals may be rounded (`10 / 3 = 3.33`).
"""

import ast
import operator
import re
from fractions import Fraction

NUMBER = r"\d+(?:\.\d+)?"
OPERATOR = r"[+\-*/×÷]"
EQUATION = re.compile(rf"({NUMBER}(?:\s*{OPERATOR}\s*{NUMBER})+)\s*=\s*(-?{NUMBER})")
# A sign right before the left side or right after the result makes the equation part of something
# larger (a power, a bracket, a longer sum, a chain of equalities): not checked.
JOINS = set("+-*/×÷^=()[]{}_\\|·")
# The tiny data writes some steps in Chinese (the language reward's target).
WORDS = {"加": "+", "减": "-", "乘": "*", "除以": "/", "等于": "="}
SYMBOLS = str.maketrans({"×": "*", "÷": "/"})
OPERATIONS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return Fraction(str(node.value))
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATIONS:
        return OPERATIONS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError("not arithmetic")


def _holds(left: str, result: str) -> bool:
    try:
        value = _value(ast.parse(left.translate(SYMBOLS), mode="eval").body)
    except (ValueError, SyntaxError, ZeroDivisionError):
        return False
    written = Fraction(result)
    decimals = len(result.partition(".")[2])
    return abs(value - written) <= (Fraction(1, 2 * 10**decimals) if decimals else 0)


def _stands_alone(text: str, start: int, end: int) -> bool:
    before, after = text[:start], text[end:]
    if before[-1:].isalnum() or after[:1].isalnum() or after[:1] == "_":  # a variable or unit glued on: 2x
        return False
    if before[-1:] in (".", ",") and before[-2:-1].isdigit():  # the tail of 1,000 or 1.5
        return False
    before, after = before.rstrip(), after.lstrip()
    if before[-1:] in JOINS or after[:1] in JOINS:
        return False
    return not (after[:1] in (".", ",") and after[1:2].isdigit())


def wrong_steps(reasoning: str) -> list[str]:
    """The equations between plain numbers in `reasoning` that do not hold."""
    for word, symbol in WORDS.items():
        reasoning = reasoning.replace(word, f" {symbol} ")
    return [match.group(0) for match in EQUATION.finditer(reasoning)
            if _stands_alone(reasoning, match.start(), match.end()) and not _holds(match.group(1), match.group(2))]
