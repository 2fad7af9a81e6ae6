"""Training-curve plots (PNG): the panels a reader of the paper expects from an RL stage."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (  # (title, metrics.jsonl keys plotted together)
    ("reward", ("reward",)),
    ("accuracy / code / format", ("rewards/accuracy/mean", "rewards/code/mean", "rewards/format/mean")),
    ("language consistency", ("rewards/language/mean",)),
    ("reward models (normalised)", ("rewards/helpful_rm/mean", "rewards/harmless_rm/mean")),
    ("mean completion length (tokens)", ("completions/mean_length",)),
    ("KL to reference", ("kl",)),
    ("groups whose rewards all tie", ("frac_reward_zero_std",)),
)


def plot_training_curves(history: list[dict], path, title: str) -> None:
    panels = [(name, keys) for name, keys in PANELS if any(k in row for row in history for k in keys)]
    if not panels:
        return
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for axis, (name, keys) in zip(axes[0], panels):
        for key in keys:
            points = [(row["step"], row[key]) for row in history if key in row and "step" in row]
            if points:
                axis.plot(*zip(*points), label=key.split("/")[-2] if "/" in key else key)
        axis.set_title(name, fontsize=10)
        axis.set_xlabel("step")
        if len(keys) > 1:
            axis.legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
