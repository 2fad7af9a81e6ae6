"""Training-curve plots (PNG): the panels a reader of the paper expects from each kind of stage."""

import io
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

RL_PANELS = (  # (title, metrics.jsonl keys plotted together)
    ("reward (weighted sum of the stage's rewards)", ("reward",)),
    ("accuracy / code / format", ("rewards/accuracy/mean", "rewards/code/mean", "rewards/format/mean")),
    ("language consistency", ("rewards/language/mean",)),
    ("reward models (normalised)", ("rewards/helpful_rm/mean", "rewards/harmless_rm/mean")),
    ("mean completion length (tokens)", ("completions/mean_length",)),
    ("KL to reference", ("kl",)),
    ("groups whose rewards all tie", ("frac_reward_zero_std",)),
    # vLLM samples, the trainer scores: TRL logs how far apart their log-probabilities of the sampled tokens are
    ("train-inference log-prob gap (vLLM vs trainer)",
     ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max")),
)
REWARD_MEAN = re.compile(r"rewards/(?P<name>.+)/mean")  # TRL's per-reward mean
SUPERVISED_PANELS = (("training loss", ("loss",)), ("learning rate", ("learning_rate",)))
PANELS_PER_ROW = 4


def series_label(key: str, keys: tuple[str, ...]) -> str:
    """The part of a metric's name that tells it from the others of its panel: rewards/format/mean -> format,
    sampling/sampling_logp_difference/max -> max."""
    parts = key.split("/")
    if len(parts) < 2:
        return key
    return parts[-2] if len({other.split("/")[-2] for other in keys if "/" in other}) > 1 else parts[-1]


def rl_panels(history: list[dict]) -> tuple:
    """The RL panels, and after the rewards' panels one for the rewards none of them names (a reward of the
    user's own, tag_count, overlong): every reward a stage used is plotted."""
    named = {key for _, keys in RL_PANELS for key in keys}
    others = tuple(dict.fromkeys(key for row in history for key in row
                                 if REWARD_MEAN.fullmatch(key) and key not in named))
    if not others:
        return RL_PANELS
    after = 1 + max(i for i, (_, keys) in enumerate(RL_PANELS) if any(REWARD_MEAN.fullmatch(k) for k in keys))
    panel = (" / ".join(REWARD_MEAN.fullmatch(key)["name"] for key in others), others)
    return (*RL_PANELS[:after], panel, *RL_PANELS[after:])


def curves_figure(history: list[dict], title: str):
    """One figure of a stage's curves (RL panels when it logged rewards, else loss and learning rate);
    final RL's general phase is shaded where `general_phase` turns on. None when nothing was logged."""
    kinds = rl_panels(history) if any("reward" in row for row in history) else SUPERVISED_PANELS
    panels = [(name, keys) for name, keys in kinds if any(k in row for row in history for k in keys)]
    if not panels:
        return None
    rows = -(-len(panels) // PANELS_PER_ROW)
    columns = min(len(panels), PANELS_PER_ROW)
    figure, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.4 * rows), squeeze=False)
    phase = [row["step"] for row in history if row.get("general_phase") and "step" in row]
    last_step = max((row["step"] for row in history if "step" in row), default=0)
    for axis, (name, keys) in zip(axes.flat, panels):
        for key in keys:
            points = [(row["step"], row[key]) for row in history if key in row and "step" in row]
            if points:
                label = series_label(key, keys) if len(keys) > 1 else None  # the title names one
                axis.plot(*zip(*points), marker="." if len(points) < 20 else None, label=label)
        if phase:
            axis.axvspan(min(phase), last_step, color="tab:orange", alpha=0.12, label="general phase")
        axis.set_title(name, fontsize=10)
        axis.set_xlabel("step")
        if len(keys) > 1 or phase:
            axis.legend(fontsize=8)
    for axis in list(axes.flat)[len(panels):]:
        axis.axis("off")
    figure.suptitle(title, fontsize=12)
    figure.tight_layout()
    return figure


def plot_training_curves(history: list[dict], path, title: str) -> None:
    figure = curves_figure(history, title)
    if figure is not None:
        figure.savefig(path, dpi=100)
        plt.close(figure)


def curves_png(history: list[dict], title: str) -> bytes | None:
    figure = curves_figure(history, title)
    if figure is None:
        return None
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return buffer.getvalue()
