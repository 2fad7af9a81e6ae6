"""How much of the tiny data's arithmetic a model knows: greedy completions of random facts drawn
the way the corpus drills draw them (`stages.lib.data.arithmetic.random_fact`), each after one solved
fact, the way a drill document reads. The tiny base's problem-solving rests on this table.

    .venv/bin/python bench/arithmetic_facts.py --model results/tiny/base --max_value 50 --max_amount 9

Prints the share right per operation and overall, and the command.
"""

import argparse
import random
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stages.lib.data.arithmetic import random_fact


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--max_value", type=int, default=50)
    parser.add_argument("--max_amount", type=int, default=9)
    parser.add_argument("--facts", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    rng = random.Random(args.seed)
    facts = [random_fact(rng, args.max_value, args.max_amount) for _ in range(args.facts)]
    prompts = [f"3 + 4 = 7. {fact.split(' = ')[0]} =" for fact in facts]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        output = model.generate(**batch, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    right, total = {}, {}
    for fact, ids in zip(facts, output[:, batch.input_ids.shape[1]:]):
        text = tokenizer.decode(ids, skip_special_tokens=True).strip()
        answer = re.match(r"\d*", text).group(0)
        op = fact.split(" ")[1]
        total[op] = total.get(op, 0) + 1
        right[op] = right.get(op, 0) + (answer == fact.split(" = ")[1])
    for op in sorted(total):
        print(f"{op}: {right[op] / total[op]:.3f} of {total[op]}")
    print(f"all: {sum(right.values()) / len(facts):.3f} of {len(facts)} facts (greedy, numbers up to "
          f"{args.max_value}, amounts up to {args.max_amount})")
    print("command: python bench/arithmetic_facts.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
