"""The cross-round picture: a CPU lane and a device lane, synchronous above cross-round.

Scope: :func:`round_timeline` takes the trace events of the toy demo run synchronously and cross-round and a
``labels`` dict in one language, and returns SVG text: a CPU lane (schedule, launch, read, commit, discard,
finish, free) and a device lane (each round from its launch to its read), in the order the events happened.
Every number drawn comes from an event's data.
Non-scope: running the demo (``gen_pictures.py``), the words (``picture_labels.py``), measured timelines
(``notes/gen_timeline.py``), matplotlib settings (``svg_figure.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mini_deepinfer.core.trace import TraceEvent
from site_scripts.pictures.svg_figure import WIDTH, draw_svg, new_figure

Labels = dict[str, str]

CPU_KINDS = ("schedule", "launch", "read", "commit", "discard", "finish", "free")
KIND_COLORS = {"schedule": "#c6d6ea", "launch": "#1f77b4", "read": "#9467bd", "commit": "#2ca02c",
               "discard": "#d62728", "finish": "#4d4d4d", "free": "#ffb000"}
DARK_KINDS = {"launch", "read", "commit", "discard", "finish"}  # white text on these


def cpu_events(events: Sequence[TraceEvent]) -> list[TraceEvent]:
    """The events the CPU lane shows, in the order they happened."""
    return [e for e in events if e.kind in CPU_KINDS]


def about_round(event: TraceEvent) -> int | None:
    """The round an event is about (``read round 2`` happens in step 3 but is about round 2)."""
    if event.kind == "schedule":
        return event.round_id
    if event.kind in ("launch", "read", "commit", "discard"):
        return event.data.get("round", event.round_id)
    return None


def in_flight(items: Sequence[TraceEvent]) -> list[tuple[int, int, int, int]]:
    """``(round, launch index, read index, track)``: each round from its launch to its read.

    A round launched before the previous one is read goes on the next free track.
    """
    launched: dict[int, int] = {}
    spans: list[tuple[int, int, int]] = []
    for i, e in enumerate(items):
        if e.kind == "launch":
            launched[e.data["round"]] = i
        elif e.kind == "read":
            spans.append((e.data["round"], launched.pop(e.data["round"]), i))
    track_ends: list[int] = []
    placed = []
    for r, start, end in sorted(spans, key=lambda s: s[1]):
        track = next((t for t, last in enumerate(track_ends) if last < start), len(track_ends))
        track_ends[track:track + 1] = [end]
        placed.append((r, start, end, track))
    return placed


CPU_Y, DEVICE_Y, TRACK_GAP = 2.0, 1.05, 0.55  # bottom of the CPU lane, of the first device track
NOTE_ROOM = 10  # boxes left of an event needed to fit a note that ends at it


def draw_lanes(ax: Any, events: Sequence[TraceEvent], labels: Labels, title: str) -> None:
    """One run's CPU lane (a box per event, numbered with the round it is about) and its device lane."""
    items = cpu_events(events)
    for i, e in enumerate(items):
        ax.barh(CPU_Y + 0.4, 0.9, left=i, height=0.8, color=KIND_COLORS[e.kind], linewidth=0)
        number = about_round(e)
        if number is not None:
            color = "white" if e.kind in DARK_KINDS else "black"
            ax.text(i + 0.45, CPU_Y + 0.4, str(number), ha="center", va="center", fontsize=8, color=color)
    for r, start, end, track in in_flight(items):
        y = DEVICE_Y - track * TRACK_GAP
        ax.barh(y + 0.22, end - start + 0.9, left=start, height=0.44, color="#aec7e8", edgecolor="#1f77b4",
                linewidth=0.8)
        ax.text(start + 0.1, y + 0.22, labels["device_round"].format(round=r), ha="left", va="center",
                fontsize=7)
    mark_steps(ax, items, labels)
    annotate_stops(ax, items, labels)
    ax.set_yticks([CPU_Y + 0.4, DEVICE_Y - 0.05])
    ax.set_yticklabels([labels["cpu"], labels["device"]])
    ax.set_ylim(DEVICE_Y - TRACK_GAP - 0.1, CPU_Y + 2.1)
    ax.set_title(title, loc="left")
    ax.tick_params(axis="x", bottom=False, labelbottom=False)
    ax.spines[["left", "bottom"]].set_visible(False)
    ax.tick_params(axis="y", left=False)


def mark_steps(ax: Any, items: Sequence[TraceEvent], labels: Labels) -> None:
    """A thin line where each engine step (``[round N]`` in the trace) begins, with its number."""
    seen: set[int] = set()
    for i, e in enumerate(items):
        if e.round_id not in seen:
            seen.add(e.round_id)
            ax.axvline(i - 0.05, ymax=0.86, color="#cccccc", linewidth=0.8, zorder=0)
            ax.text(i, CPU_Y + 0.95, labels["step"].format(n=e.round_id), ha="left", va="bottom", fontsize=7,
                    color="#666666")


def annotate_stops(ax: Any, items: Sequence[TraceEvent], labels: Labels) -> None:
    """Point at each discard (a token computed after a stop) and each free (slots back in the pool).

    Notes about frees sit on a lower line than notes about discards, so neighbours do not overlap.
    """
    for i, e in enumerate(items):
        if e.kind == "discard":
            text, level = labels["discard_note"].format(round=e.data["round"]), CPU_Y + 1.75
        elif e.kind == "free":
            text = labels["free_note"].format(request=e.request_id, n=len(e.data["slots"]))
            level = CPU_Y + 1.3
        else:
            continue
        dx, ha = (-0.4, "right") if i >= NOTE_ROOM else (1.3, "left")  # a note ends where it points
        ax.annotate(text, xy=(i + 0.45, CPU_Y + 0.8), xytext=(i + 0.45 + dx, level), ha=ha, va="bottom",
                    fontsize=7.5, arrowprops={"arrowstyle": "->", "linewidth": 0.8})


def round_timeline(sync_events: Sequence[TraceEvent], cross_events: Sequence[TraceEvent],
                   labels: Labels) -> str:
    """The timeline picture: the synchronous run above the cross-round run of the same requests.

    The horizontal axis is the order of events, not measured time: a device bar spans from a round's launch
    to its read, however long the device took.
    """
    def draw() -> Any:
        from matplotlib.patches import Patch

        longest = max(len(cpu_events(sync_events)), len(cpu_events(cross_events)))
        figure, (sync_ax, cross_ax) = new_figure(WIDTH, 4.8, nrows=2, sharex=True)
        draw_lanes(sync_ax, sync_events, labels, labels["sync_title"])
        draw_lanes(cross_ax, cross_events, labels, labels["cross_title"])
        cross_ax.set_xlim(-0.3, longest + 0.3)
        cross_ax.set_xlabel(labels["order_note"])
        handles = [Patch(color=KIND_COLORS[k], label=labels[k]) for k in CPU_KINDS]
        handles.append(Patch(facecolor="#aec7e8", edgecolor="#1f77b4", label=labels["in_flight"]))
        figure.legend(handles=handles, loc="outside lower center", ncols=4)
        figure.suptitle(labels["title"], fontweight="bold")
        return figure

    return draw_svg(draw)
