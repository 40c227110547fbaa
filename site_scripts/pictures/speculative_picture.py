"""The speculative picture: per round, the drafts, what verification kept, and both caches.

Scope: :func:`speculative_rounds` takes the trace events of a two-model example and a ``labels`` dict in one
language, and returns SVG text: per speculative round, the drafts, the accepted prefix, the rejected tail, the
bonus or correction token, and both caches' lengths before and after the restore. Every number drawn comes
from an event's data.
Non-scope: running the example (``gen_pictures.py``), the words (``picture_labels.py``), matplotlib settings
(``svg_figure.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mini_deepinfer.core.trace import TraceEvent
from site_scripts.pictures.svg_figure import WIDTH, draw_svg, new_figure

Labels = dict[str, str]
ACCEPTED, REJECTED, BONUS, CORRECTION = "#2ca02c", "#d62728", "#1f77b4", "#ff7f0e"
INPUT, KEPT, COMPUTED = "#bdbdbd", "#4d4d4d", "#d9d9d9"


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
