"""The loss curves of the trained target and drafts, drawn from their committed training records.

Scope: ``trained-loss.<lang>.svg``: on the left the training loss against tokens seen (the target and the
corpus-only draft in nats per token, the distilled draft's KL divergence from the target in nats per token);
on the right the target's held-out bits per character during training and at the end, per language. The
title names each CPU and number of threads the training records say the models ran on; its words, in English
and in Chinese, are in ``words.toml`` (table ``gen_trained_pictures``). Non-scope: training (the ``training``
package), the tables (``gen_trained``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from site_scripts.build.common import phrases
from site_scripts.pictures.svg_figure import WIDTH, draw_svg, new_figure
from site_scripts.trained.committed import record

OUTPUT_DIR = "docs/assets/pictures"
LANGUAGES = ("zh", "en")
LABELS = phrases(__name__)["labels"]  # in words.toml, each label in English and in Chinese
COLORS = {"target": "#1f77b4", "draft": "#ff7f0e", "corpus": "#7f7f7f", "en": "#2ca02c", "zh": "#d62728"}


def _tokens_per_step(made: dict[str, Any]) -> float:
    return made["schedule"]["batch"] * made["schedule"]["seq_len"] / 1e6


def title(lang: str, runs: dict[str, dict[str, Any]]) -> str:
    """The title: each machine the records name (CPU, threads) and the models that trained on it."""
    labels, where = LABELS[lang], {}
    for key, made in runs.items():
        where.setdefault((made["cpu"], made["threads"]), []).append(key)
    parts = [labels["machine"].format(who=labels["who"].get(" ".join(keys), " + ".join(keys)), cpu=cpu,
                                      threads=threads) for (cpu, threads), keys in where.items()]
    return labels["title"].format(machines=labels["sep"].join(parts))


def loss_picture(lang: str) -> str:
    labels = LABELS[lang]
    runs = {"target": record("target"), "draft": record("draft"), "corpus": record("draft-corpus-only")}

    def draw() -> Any:
        figure, (losses, bits) = new_figure(WIDTH, 3.4, ncols=2)
        for key, made in runs.items():
            per_step = _tokens_per_step(made)
            steps, values = zip(*made["training"]["loss"])
            losses.plot([s * per_step for s in steps], values, color=COLORS[key], label=labels[key])
        losses.set_xlabel(labels["tokens"])
        losses.set_ylabel(labels["loss"])
        losses.legend()
        target = runs["target"]
        per_step = _tokens_per_step(target)
        points = target["training"]["held_out_during"]
        end = target["schedule"]["steps"]
        for key in ("en", "zh"):
            xs = [p["step"] * per_step for p in points] + [end * per_step]
            final = target["scores"][f"held_out_{key}"]["bits_per_char"]
            ys = [p[f"held_out_{key}"] for p in points] + [final]
            bits.plot(xs, ys, marker="o", color=COLORS[key], label=labels[key])
            bits.annotate(f"{ys[-1]:.2f}", (xs[-1], ys[-1]), textcoords="offset points", xytext=(4, 4))
        bits.set_xlabel(labels["tokens"])
        bits.set_ylabel(labels["bits"])
        bits.legend()
        figure.suptitle(title(lang, runs))
        return figure

    return draw_svg(draw)


OUTPUTS: dict[str, Callable[[], str]] = {f"trained-loss.{lang}.svg": partial(loss_picture, lang)
                                         for lang in LANGUAGES}
