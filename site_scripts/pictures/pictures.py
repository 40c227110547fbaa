"""Pictures of the engine's rounds, drawn from the trace events that the demos print.

Scope: three pictures, one function each, taking a list of ``TraceEvent`` (plus settings the trace does not
carry, such as the token budget) and a ``labels`` dict in one language, returning SVG text; the same code
draws the Chinese and the English picture (``picture_labels.py`` holds the words):

* :func:`abc_rounds`: per round, each request's share of the token budget (prefill chunk or decode), and who
  holds each KV slot and each state slot at the end of every round (B's slots freed, C taking them);
* :func:`round_timeline`: a CPU lane (schedule, launch, read, commit, discard, finish, free) and a device lane
  (each round from its launch to its read), synchronous above cross-round, in the order the events happened;
* :func:`speculative_rounds`: per speculative round, the drafts, the accepted prefix, the rejected tail, the
  bonus or correction token, and both caches' lengths before and after the restore.

Every number drawn comes from an event's data; nothing is re-derived from the engine's rules, except that a
state slot is held from a request's first prefill chunk until the ``free`` event that gives it back (the
trace names a request's state slot only there).
Non-scope: running the demos (``gen_pictures.py``), benchmark charts (``charts.py``), matplotlib settings
(``svg_figure.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mini_deepinfer.core.trace import TraceEvent
from site_scripts.pictures.svg_figure import WIDTH, draw_svg, new_figure, request_colors

Labels = dict[str, str]
Holders = dict[int, dict[int, str]]  # round -> {slot: request id} at the end of that round

CPU_KINDS = ("schedule", "launch", "read", "commit", "discard", "finish", "free")
KIND_COLORS = {"schedule": "#c6d6ea", "launch": "#1f77b4", "read": "#9467bd", "commit": "#2ca02c",
               "discard": "#d62728", "finish": "#4d4d4d", "free": "#ffb000"}
DARK_KINDS = {"launch", "read", "commit", "discard", "finish"}  # white text on these
ACCEPTED, REJECTED, BONUS, CORRECTION = "#2ca02c", "#d62728", "#1f77b4", "#ff7f0e"
INPUT, KEPT, COMPUTED = "#bdbdbd", "#4d4d4d", "#d9d9d9"


def request_ids(events: Sequence[TraceEvent]) -> list[str]:
    """The requests that were scheduled, sorted (A, B, C; req-0, req-1)."""
    return sorted({e.request_id for e in events if e.kind == "schedule"})


# ------------------------------------------------------------------------------------------------------------
# A/B/C: the budget and the slots.
# ------------------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------------------
# Cross-round: a CPU lane and a device lane.
# ------------------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------------------
# Speculative decoding: drafts, verification, both caches.
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeculativeRound:
    """One verified decode of one request, as its trace events tell it."""

    round_id: int
    start: int  # the position of the round's input t0
    input_token: int
    drafts: list[int]
    accepted: int
    committed: list[int]  # the accepted drafts, then the bonus or the correction
    target_before: int  # positions the target cache held after the verify forward
    target_after: int  # ... after the rollback
    draft_computed: int
    draft_kept: int
    draft_topup: int | None  # the draft cache's length after the next round's top-up (None: no next round)


def draft_cache_lengths(verify: dict[str, Any]) -> tuple[int, int]:
    """``(computed, kept)`` of the draft cache, from a ``verify`` event's data."""
    if "draft_computed" in verify:
        return int(verify["draft_computed"]), int(verify["draft_kept"])
    found = re.fullmatch(r"computed (\d+) -> keep (\d+)", verify["draft_cache"])
    if found is None:
        raise ValueError(f"unreadable draft_cache in a verify event: {verify['draft_cache']!r}")
    return int(found[1]), int(found[2])


def speculative_rounds_of(events: Sequence[TraceEvent]) -> list[SpeculativeRound]:
    """Every verified decode in the trace: ``schedule`` + ``verify`` + ``commit`` (+ ``rollback``)."""
    def one(kind: str, r: int, rid: str) -> TraceEvent | None:
        return next((e for e in events if e.kind == kind and e.round_id == r and e.request_id == rid), None)

    found = []
    for v in (e for e in events if e.kind == "verify"):
        r, rid = v.round_id, v.request_id
        schedule, commit, rollback = one("schedule", r, rid), one("commit", r, rid), one("rollback", r, rid)
        start, width = schedule.data["start_pos"], len(schedule.data["inputs"]) - 1
        later = [e for e in events if e.kind == "schedule" and e.request_id == rid and e.round_id > r]
        computed, kept = draft_cache_lengths(v.data)
        accepted = v.data["accepted"]
        found.append(SpeculativeRound(
            r, start, schedule.data["inputs"][0], list(v.data["drafts"]), accepted,
            list(commit.data["tokens"]), start + width + 1,
            rollback.data["kept"] if rollback else start + accepted + 1, computed, kept,
            later[0].data["start_pos"] + 1 if later else None))
    return found


SPEC_ROWS = ("proposed", "committed", "target_cache", "draft_cache")  # top to bottom


def token_cell(ax: Any, row: int, position: int, token: int, color: str, hatch: str | None = None) -> None:
    ax.barh(row, 0.9, left=position - 0.45, height=0.72, color=color, hatch=hatch, edgecolor="white",
            linewidth=0.6)
    ax.text(position, row, str(token), ha="center", va="center", fontsize=7, color="white",
            fontweight="bold")


def draw_tokens(ax: Any, sr: SpeculativeRound) -> None:
    """Top row: the input and the drafts (accepted, rejected); second row: what was committed."""
    proposed, committed = 3, 2
    token_cell(ax, proposed, sr.start, sr.input_token, INPUT)
    for j, token in enumerate(sr.drafts):
        ok = j < sr.accepted
        token_cell(ax, proposed, sr.start + 1 + j, token, ACCEPTED if ok else REJECTED, None if ok else "//")
    last = BONUS if sr.accepted == len(sr.drafts) else CORRECTION
    for j, token in enumerate(sr.committed):
        token_cell(ax, committed, sr.start + 1 + j, token, last if j == len(sr.committed) - 1 else ACCEPTED)


def draw_caches(ax: Any, sr: SpeculativeRound, labels: Labels) -> None:
    """Bottom rows: each cache's positions, kept after the restore (dark) and dropped by it (light)."""
    target, draft = 1, 0
    for row, computed, kept in ((target, sr.target_before, sr.target_after),
                                (draft, sr.draft_computed, sr.draft_kept)):
        ax.barh(row, computed, left=-0.5, height=0.5, color=COMPUTED, linewidth=0)
        ax.barh(row, kept, left=-0.5, height=0.5, color=KEPT, linewidth=0)
    if sr.draft_topup is not None and sr.draft_topup > sr.draft_kept:
        ax.barh(draft, sr.draft_topup - sr.draft_kept, left=sr.draft_kept - 0.5, height=0.5, fill=False,
                edgecolor=KEPT, linestyle="--", linewidth=0.9)
    right = max(sr.target_before, sr.draft_computed, sr.draft_topup or 0) - 0.2
    ax.text(right, target, labels["target_lengths"].format(before=sr.target_before, after=sr.target_after),
            va="center", fontsize=8)
    draft_text = labels["draft_lengths"] if sr.draft_topup is not None else labels["draft_lengths_last"]
    ax.text(right, draft, draft_text.format(computed=sr.draft_computed, kept=sr.draft_kept,
                                            topup=sr.draft_topup), va="center", fontsize=8)


def round_title(sr: SpeculativeRound, labels: Labels) -> str:
    kind = "bonus" if sr.accepted == len(sr.drafts) else "correction"
    return labels["round_title"].format(round=sr.round_id, k=len(sr.drafts), accepted=sr.accepted,
                                        last=labels[kind], token=sr.committed[-1])


def speculative_rounds(events: Sequence[TraceEvent], labels: Labels) -> str:
    """The speculative picture: one panel per verified round, tokens on top, both caches below."""
    rounds = speculative_rounds_of(events)
    if not rounds:
        raise ValueError("the trace has no verify event: no speculative round to draw")

    def draw() -> Any:
        from matplotlib.patches import Patch

        right = max(max(sr.target_before, sr.draft_topup or 0) for sr in rounds)
        figure, axes = new_figure(WIDTH, 1.45 * len(rounds) + 1.1, nrows=len(rounds), sharex=True)
        for ax, sr in zip(axes, rounds):
            draw_tokens(ax, sr)
            draw_caches(ax, sr, labels)
            ax.set_yticks(range(len(SPEC_ROWS)))
            ax.set_yticklabels([labels[row] for row in reversed(SPEC_ROWS)])
            ax.set_ylim(-0.5, len(SPEC_ROWS) - 0.5)
            ax.set_title(round_title(sr, labels), loc="left")
            ax.tick_params(axis="y", left=False)
        axes[-1].set_xlim(-0.7, right + 8)
        axes[-1].set_xticks(range(0, right + 1))
        axes[-1].set_xlabel(labels["position"])
        colors = (("input", INPUT, None), ("accepted", ACCEPTED, None), ("rejected", REJECTED, "//"),
                  ("bonus", BONUS, None), ("correction", CORRECTION, None), ("computed", COMPUTED, None),
                  ("kept", KEPT, None))
        handles = [Patch(facecolor=c, hatch=h, edgecolor="white", label=labels[key]) for key, c, h in colors]
        handles.append(Patch(fill=False, edgecolor=KEPT, linestyle="--", label=labels["topup"]))
        figure.legend(handles=handles, loc="outside lower center", ncols=3)
        figure.suptitle(labels["title"], fontweight="bold")
        return figure

    return draw_svg(draw)
