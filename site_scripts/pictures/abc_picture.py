"""The A/B/C picture: per round, each request's share of the token budget and who holds each slot.

Scope: :func:`abc_rounds` takes the trace events of the A/B/C demo (plus the token budget and the state-slot
capacity, which the trace does not carry) and a ``labels`` dict in one language, and returns SVG text: per
round, each request's share of the token budget (prefill chunk or decode), and who holds each KV slot and each
state slot at the end of every round (B's slots freed, C taking them). Every number drawn comes from an
event's data, except that a state slot is held from a request's first prefill chunk until the ``free`` event
that gives it back (the trace names a request's state slot only there).
Non-scope: running the demo (``gen_pictures.py``), the words (``picture_labels.py``), matplotlib settings
(``svg_figure.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mini_deepinfer.core.trace import TraceEvent
from site_scripts.pictures.svg_figure import WIDTH, draw_svg, new_figure, request_colors

Labels = dict[str, str]
Holders = dict[int, dict[int, str]]  # round -> {slot: request id} at the end of that round


def request_ids(events: Sequence[TraceEvent]) -> list[str]:
    """The requests that were scheduled, sorted (A, B, C; req-0, req-1)."""
    return sorted({e.request_id for e in events if e.kind == "schedule"})





def slot_holders(events: Sequence[TraceEvent]) -> tuple[Holders, Holders]:
    """Who holds each KV slot and each state slot during every round.

    A slot is held during a round if it was held when the round began or was taken in it; a slot given back
    in a round still counts for that round (it was used there) and is free from the next one. KV slots are
    taken by ``schedule`` events and given back by ``rollback`` and ``free`` events. A request's state slot
    is named only by its ``free`` event; it was held from the request's first prefill chunk.
    """
    state_of = {e.request_id: e.data.get("state_slot") for e in events if e.kind == "free"}
    kv: dict[int, str] = {}
    state: dict[int, str] = {}
    kv_during: Holders = {}
    state_during: Holders = {}
    for e in events:
        kv_now = kv_during.setdefault(e.round_id, dict(kv))
        state_now = state_during.setdefault(e.round_id, dict(state))
        if e.kind == "schedule":
            taken = {slot: e.request_id for slot in e.data["slots"]}
            kv.update(taken)
            kv_now.update(taken)
            if e.data["start_pos"] == 0 and state_of.get(e.request_id) is not None:
                state[state_of[e.request_id]] = state_now[state_of[e.request_id]] = e.request_id
        elif e.kind in ("rollback", "free"):
            for slot in e.data["slots"]:
                kv.pop(slot, None)
            if e.kind == "free" and e.data.get("state_slot") is not None:
                state.pop(e.data["state_slot"], None)
    return kv_during, state_during


def holder_runs(holders: Holders, rounds: Sequence[int]) -> list[tuple[int, str, int, int]]:
    """``(slot, request, first round, last round)`` for every stretch of rounds a request holds a slot."""
    runs: list[tuple[int, str, int, int]] = []
    open_runs: dict[int, list[Any]] = {}
    for r in rounds:
        now = holders.get(r, {})
        for slot, run in list(open_runs.items()):
            if now.get(slot) != run[1]:
                runs.append(tuple(open_runs.pop(slot)))
        for slot, rid in now.items():
            if slot in open_runs:
                open_runs[slot][3] = r
            else:
                open_runs[slot] = [slot, rid, r, r]
    runs.extend(tuple(run) for run in open_runs.values())
    return sorted(runs)


def first_takeover(events: Sequence[TraceEvent], state: bool) -> tuple[int, int, str, str] | None:
    """The first admission into a slot another request gave back: ``(round, slot, new, old)``.

    ``state`` picks the state slots, else the KV slots of the request's first prefill chunk.
    """
    state_of = {e.request_id: e.data.get("state_slot") for e in events if e.kind == "free"}
    given_back: dict[int, str] = {}
    for e in events:
        if e.kind == "free":
            slots = [e.data.get("state_slot")] if state else e.data["slots"]
            given_back.update({slot: e.request_id for slot in slots if slot is not None})
        elif e.kind == "schedule" and e.data["start_pos"] == 0:
            slots = [state_of.get(e.request_id)] if state else e.data["slots"]
            for slot in slots:
                if slot in given_back and given_back[slot] != e.request_id:
                    return e.round_id, slot, e.request_id, given_back[slot]
    return None


def draw_budget(ax: Any, events: Sequence[TraceEvent], colors: dict[str, str], budget: int,
                labels: Labels) -> None:
    """Stacked bars: the tokens each request ran in each round; prefill chunks hatched."""
    height: dict[int, int] = {}
    for e in events:
        if e.kind != "schedule":
            continue
        n, bottom = len(e.data["inputs"]), height.get(e.round_id, 0)
        prefill = e.data["phase"] == "prefill"
        ax.bar(e.round_id, n, bottom=bottom, width=0.8, color=colors[e.request_id], edgecolor="white",
               hatch="///" if prefill else None, linewidth=0.8)
        ax.text(e.round_id, bottom + n / 2, f"{e.request_id} {n}", ha="center", va="center", fontsize=7.5,
                color="white", fontweight="bold")
        height[e.round_id] = bottom + n
    ax.axhline(budget, color="#555555", linestyle="--", linewidth=1)
    ax.text(max(height) + 0.45, budget, labels["budget"].format(n=budget), ha="right", va="bottom",
            fontsize=8, color="#555555")
    ax.set_ylim(0, budget * 1.15)
    ax.set_ylabel(labels["tokens"])
    ax.set_title(labels["budget_title"], loc="left")


def draw_slot_grid(ax: Any, holders: Holders, rounds: Sequence[int], colors: dict[str, str],
                   capacity: int, letters: bool) -> None:
    """One row per slot, one cell per round, coloured by the request holding the slot in that round."""
    for slot, rid, first, last in holder_runs(holders, rounds):
        ax.barh(slot, last - first + 0.84, left=first - 0.42, height=0.9, color=colors[rid], linewidth=0)
        if letters:
            for r in range(first, last + 1):
                ax.text(r, slot, rid, ha="center", va="center", fontsize=7.5, color="white",
                        fontweight="bold")
    ax.set_ylim(capacity - 0.5, -0.5)
    step = 1 if capacity <= 8 else 5
    ax.set_yticks(range(0, capacity, step))
    ax.grid(axis="y", color="#eeeeee", linewidth=0.5)
    ax.set_axisbelow(True)


def annotate_takeover(ax: Any, takeover: tuple[int, int, str, str] | None, holders: Holders,
                      labels: Labels) -> None:
    """Point from a note right of the last round at the first slot a request took over from another."""
    if takeover is None:
        return
    r, slot, new, old = takeover
    last = max(k for k, held in holders.items() if held.get(slot) == new)
    ax.annotate(labels["takeover"].format(new=new, old=old), xy=(last + 0.45, slot),
                xytext=(max(holders) + 0.8, slot),
                ha="left", va="center", fontsize=8, arrowprops={"arrowstyle": "->", "linewidth": 0.8})


def abc_rounds(events: Sequence[TraceEvent], labels: Labels, budget: int, state_capacity: int) -> str:
    """The A/B/C picture: the budget per round, then state-slot and KV-slot holders per round.

    Args:
        events: the engine's trace of one run (``engine.trace.events``).
        labels: the words of one language (``picture_labels.ABC``).
        budget: the round's token budget (``max_batched_tokens``).
        state_capacity: state slots in the cache (the KV capacity comes from the ``free`` events).
    """
    def draw() -> Any:
        colors = request_colors(request_ids(events))
        rounds = sorted({e.round_id for e in events if e.round_id > 0})
        kv_during, state_during = slot_holders(events)
        kv_capacity = max(e.data["capacity"] for e in events if e.kind == "free")
        figure, (top, middle, bottom) = new_figure(WIDTH, 7.6, nrows=3, sharex=True,
                                                   height_ratios=[2.3, 0.9, 4.4])
        draw_budget(top, events, colors, budget, labels)
        draw_slot_grid(middle, state_during, rounds, colors, state_capacity, letters=True)
        middle.set_title(labels["state_title"], loc="left")
        middle.set_ylabel(labels["state_axis"])
        annotate_takeover(middle, first_takeover(events, state=True), state_during, labels)
        draw_slot_grid(bottom, kv_during, rounds, colors, kv_capacity, letters=False)
        bottom.set_title(labels["kv_title"], loc="left")
        bottom.set_ylabel(labels["kv_axis"])
        annotate_takeover(bottom, first_takeover(events, state=False), kv_during, labels)
        bottom.set_xticks(rounds)
        bottom.set_xlabel(labels["round"])
        bottom.set_xlim(min(rounds) - 0.6, max(rounds) + 2.6)
        figure.legend(handles=abc_legend(colors, labels), loc="outside lower center", ncols=3)
        figure.suptitle(labels["title"], fontweight="bold")
        return figure

    return draw_svg(draw)


def abc_legend(colors: dict[str, str], labels: Labels) -> list[Any]:
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=labels["request"].format(request=rid)) for rid, c in colors.items()]
    return handles + [Patch(facecolor="#888888", edgecolor="white", hatch="///", label=labels["prefill"]),
                      Patch(facecolor="#888888", label=labels["decode"])]
