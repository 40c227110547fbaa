"""Measured round timelines: where each round's time went on the host and on the device, as recorded.

Scope: one picture per committed ``bench.rounds`` report that has a timeline (``timeline_ms`` in its median
run's rounds), ``timeline-<stem>.zh.svg`` and ``.en.svg``: for the synchronous and the cross-round mode, a few
steady decode rounds, each drawn as spans on a host lane (``launch``, the wait in ``read``, the engine's own
work) and on a device lane (the span between the two device events around the round's queued work). The
spans are the recorded ones: host spans from the host clock, device spans from device events, both measured
from the run's start (the device was idle then, so the two clocks start together to within the time one
event takes). A report from a CPU has no device lane: there the work is inside ``launch``.
Non-scope: measuring (``python -m mini_deepinfer.bench.rounds``), the tables (``bench.rounds`` renders them).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from site_scripts.build.common import SNIPPETS, read_json
from site_scripts.pictures import picture_labels
from site_scripts.pictures.svg_figure import draw_svg, new_figure

OUTPUT_DIR = "docs/assets/pictures"
LANGUAGES = ("zh", "en")
SHOWN_ROUNDS = 5  # steady rounds per mode
FIRST_SHOWN = 4  # the first rounds fill the batch and warm caches: start a few rounds in
COLORS = {"launch": "#1f77b4", "read": "#d62728", "engine": "#9e9e9e", "device": "#2ca02c"}


def timeline_reports() -> dict[str, Path]:
    """``timeline-<stem>`` for each committed rounds report whose rounds carry a timeline (in any folder under
    ``snippets/bench/``: the timeline runs sit in ``timelines/``, away from the charts of the top folder)."""
    found = {}
    for path in sorted((SNIPPETS / "bench").rglob("*.json")):
        report = read_json(path)
        rounds = report.get("results", {}).get("synchronous", {}).get("median_run", {}).get("rounds", [])
        if report.get("benchmark") == "rounds" and rounds and "timeline_ms" in rounds[0]:
            found[f"timeline-{path.stem}"] = path
    return found


def shown_rounds(report: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    """A few steady rounds (decode launched, a round read) of the mode's median run."""
    rounds = report["results"][mode]["median_run"]["rounds"]
    steady = [r for r in rounds if r["launched"] == "decode" and r["read"]]
    return steady[FIRST_SHOWN : FIRST_SHOWN + SHOWN_ROUNDS]


# --8<-- [start:draw]
def draw_mode(ax: Any, rounds: list[dict[str, Any]], words: dict[str, str]) -> None:
    """Two lanes: the host's spans (launch, read wait, the rest of the step) and the device's."""
    zero = rounds[0]["timeline_ms"]["step"][0]
    for r in rounds:
        t = r["timeline_ms"]
        ax.barh(1, t["step"][1] - t["step"][0], left=t["step"][0] - zero, color=COLORS["engine"], height=0.5)
        for part in ("launch", "read"):
            if t[part] is not None:
                ax.barh(1, t[part][1] - t[part][0], left=t[part][0] - zero, color=COLORS[part], height=0.5)
        if t["device"] is not None:
            ax.barh(0, t["device"][1] - t["device"][0], left=t["device"][0] - zero, color=COLORS["device"],
                    height=0.5)
        ax.text(t["step"][0] - zero, 1.36, str(r["round"]), fontsize=7, color="#555555")
    if rounds[0]["timeline_ms"]["device"] is None:
        ax.text(0, 0, words["no_device"], va="center", fontsize=8, color="#555555")
    ax.set_yticks([0, 1], [words["device"], words["host"]])
    ax.set_ylim(-0.5, 1.6)
# --8<-- [end:draw]


def timeline(path: Path, lang: str) -> str:
    report = read_json(path)
    words = picture_labels.MEASURED_TIMELINE[lang]
    device = report["device"]["name"] if report["device"]["type"] != "cpu" else "CPU"

    def draw() -> Any:
        figure, axes = new_figure(7.2, 3.4, nrows=2, sharex=True)
        for ax, mode in zip(axes, ("synchronous", "cross_round")):
            draw_mode(ax, shown_rounds(report, mode), words)
            ax.set_title(words["title"].format(device=device, mode=words[mode]), loc="left")
        axes[-1].set_xlabel(words["ms"])
        handles = [axes[0].barh(0, 0, color=COLORS[k]) for k in ("launch", "read", "engine", "device")]
        names = [words["launch"], words["read"], words["engine"], words["gpu"]]
        figure.legend(handles, names, loc="outside lower center", ncols=4, fontsize=8)
        return figure

    return draw_svg(draw)


OUTPUTS = {f"{name}.{lang}.svg": partial(timeline, path, lang)
           for name, path in timeline_reports().items() for lang in LANGUAGES}
