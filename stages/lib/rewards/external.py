"""Rewards from outside the checkout: a GRPO section's `rewards` entry `path/to/file.py:function` (a file,
relative to the directory Snakemake runs in) or `package.module:function` (a module the jobs can import:
installed, or on PYTHONPATH, which jobs keep). The function is a TRL reward function,

    def cites_step(prompts, completions, **kwargs) -> list[float | None]

one score per completion (None where it does not apply); dataset columns (`solution`, `id`, `level`, ...)
and TRL's `completion_ids` arrive as keyword arguments. TRL logs it as rewards/<function>/mean.
Torch-free: the workflow checks the references when it plans, and makes each one's source file an input
of its stage.
"""

import hashlib
import importlib
import importlib.util
import inspect
import numbers
import os
import sys
from pathlib import Path

from stages.lib.rewards.registry import is_reference, reward_name

FILE_SUFFIX = ".py"


def split_reference(reference: str) -> tuple[str, str]:
    """`where:function` -> (where, function); `where` is a file when it ends in .py, else a module."""
    where, _, function = reference.rpartition(":")
    return where, function


def is_file_reference(reference: str) -> bool:
    return split_reference(reference)[0].endswith(FILE_SUFFIX)


def import_module_of(reference: str):
    """The module a reference names. A file is loaded under a name of its own path, once per process; a
    module is imported with the working directory on the path first, as `python -m stages.grpo` has it."""
    where, _ = split_reference(reference)
    if not is_file_reference(reference):
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(where)
    path = Path(where).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no file {where} (a relative path is from the directory Snakemake runs in)")
    name = f"r1_reward_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def source_file(reference: str) -> str | None:
    """The file that defines a reference's function: the stage's input, hashed into its manifest. None for a
    module that has no file of its own (a namespace package)."""
    where, _ = split_reference(reference)
    if is_file_reference(reference):
        return where
    origin = getattr(import_module_of(reference), "__file__", None)
    return origin if origin and Path(origin).is_file() else None


def own_reward_files(rewards: list[str]) -> dict[str, str]:
    """A stage's own rewards (its `rewards` entries that are references) -> the file defining each, by the name it
    logs under: the stage's inputs (the rule's, so an edit reruns it; the manifest's, with its sha256)."""
    return {reward_name(entry): path for entry in rewards if is_reference(entry) and (path := source_file(entry))}


def load_function(reference: str):
    module = import_module_of(reference)
    where, function = split_reference(reference)
    if not hasattr(module, function):
        defined = sorted(name for name, value in vars(module).items()
                         if callable(value) and not name.startswith("_") and getattr(value, "__module__", "") ==
                         module.__name__)
        raise AttributeError(f"{where} has no {function!r} (it defines {defined or 'no function'})")
    value = getattr(module, function)
    if not callable(value):
        raise TypeError(f"{function!r} in {where} is not a function (its type: {type(value).__name__})")
    if inspect.iscoroutinefunction(value):
        raise TypeError(f"{function!r} in {where} is async: write a plain function")
    return value


def reference_problem(reference: str) -> str | None:
    """Why a reference cannot be used, in one line (None: it can): the file or module must import and
    define a callable of that name. Importing runs the module's top level, as the stage will."""
    try:
        load_function(reference)
    except (FileNotFoundError, AttributeError, TypeError) as error:
        return str(error)
    except BaseException as error:  # the user's code: whatever its import raises is theirs to fix
        first_line = (str(error).strip().splitlines() or [""])[0]
        return f"importing {split_reference(reference)[0]} failed: {type(error).__name__}: {first_line}"
    return None


class ExternalReward:
    """A user's reward function as the trainer calls it, with its answer checked: one number or None per
    completion. `score` scores one completion, as the registry's rewards do (`python -m stages.rewards score`)."""

    def __init__(self, reference: str):
        self.reference = reference
        self.function = load_function(reference)
        self.__name__ = reward_name(reference)  # TRL logs rewards/<name>/mean

    def __call__(self, prompts=None, completions=(), **kwargs) -> list[float | None]:
        scores = self.function(prompts=prompts, completions=completions, **kwargs)
        if not isinstance(scores, (list, tuple)) or len(scores) != len(completions):
            got = f"{len(scores)} values" if isinstance(scores, (list, tuple)) else type(scores).__name__
            raise ValueError(f"reward {self.reference} returned {got} for {len(completions)} completions: "
                             "return a list of one float (or None) per completion")
        wrong = next((s for s in scores if s is not None and not isinstance(s, numbers.Real)), None)
        if wrong is not None:
            raise ValueError(f"reward {self.reference} returned {wrong!r} ({type(wrong).__name__}): "
                             "each score must be a number or None")
        return [None if s is None else float(s) for s in scores]

    def score(self, text: str, num_tokens: int, row: dict) -> float | None:
        columns = {key: [value] for key, value in row.items() if key not in ("prompt", "completion")}
        return self(prompts=[row.get("prompt")], completions=[text], **columns)[0]
