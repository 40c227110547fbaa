"""Charts of the committed benchmark results (``snippets/bench/*.json``) for the performance page.

Scope: one function per benchmark, taking the report as the benchmark command wrote it and a ``labels`` dict
in one language, returning SVG text. Every chart names the device, the dtype and the date it was measured on,
and shows the spread of the runs where the report has one:

* :func:`rounds_chart` (``python -m mini_deepinfer.bench.rounds``): synchronous against cross-round;
* :func:`speculative_chart` (``python -m mini_deepinfer.bench.speculative``): the cost of speculative decoding
  against the acceptance rate, one point per draft and width;
* :func:`transformers_chart` (``python -m mini_deepinfer.bench``): our engine against transformers.

Non-scope: running a benchmark (never done at build time: timings change on every run), matplotlib settings
(``svg_figure.py``).
"""

from __future__ import annotations

from typing import Any

from site_scripts.pictures.svg_figure import WIDTH, draw_svg, lines_within, new_figure

Labels = dict[str, str]
Report = dict[str, Any]
SYNC, CROSS, OURS, THEIRS = "#1f77b4", "#ff7f0e", "#1f77b4", "#7f7f7f"
ROUNDS_TIMES = ("first_token_ms", "finish_ms", "run_wall_ms")
ROUNDS_COUNTS = ("steps", "forwards", "discarded_tokens")
DRAFT_MARKERS = {"always": "o", "sometimes": "s", "never": "X", "half-depth": "D"}


def chart_title(labels: Labels, report: Report) -> str:
    """The title, then a line with the device, dtype, date (day only) and workload of the measurement, broken
    between its parts where it would be wider than the chart (a long CPU name)."""
    device = report["device"]
    where = device["name"] if device["type"] == "cpu" else f"{device['type']} {device['name']}"
    measured = labels["measured_on"].format(device=where, dtype=report["dtype"], date=report["date"][:10])
    config = report["config"]
    workload = labels["workload"].format(preset=config["preset"], repeats=config["repeats"])
    parts = [*measured.split(" · "), workload]
    return f"{labels['title']}\n{lines_within(parts, WIDTH)}"


def grouped_bars(ax: Any, keys: tuple[str, ...], sides: list[tuple[str, str, list[float]]],
                 errors: list[list[list[float]]] | None = None) -> list[Any]:
    """Horizontal bars, one group per key, one bar per side ``(label, colour, values)``, values printed.

    Returns each side's bars (legend handles).
    """
    height = 0.8 / len(sides)
    handles = []
    for i, (label, color, values) in enumerate(sides):
        ys = [k + (i - (len(sides) - 1) / 2) * height for k in range(len(keys))]
        bars = ax.barh(ys, values, height=height * 0.95, color=color, label=label,
                       xerr=None if errors is None else errors[i], ecolor="#333333", capsize=2)
        ax.bar_label(bars, fmt="%.4g", padding=3, fontsize=7.5)
        handles.append(bars)
    ax.set_yticks(range(len(keys)))
    ax.invert_yaxis()
    ax.margins(x=0.25)
    return handles


def median_and_spread(summaries: list[dict[str, float]]) -> tuple[list[float], list[list[float]]]:
    """Medians, and the error-bar lengths down to the fastest run and up to the slowest."""
    medians = [s["median"] for s in summaries]
    spread = [[s["median"] - s["min"] for s in summaries], [s["max"] - s["median"] for s in summaries]]
    return medians, spread


def rounds_chart(report: Report, labels: Labels) -> str:
    """Synchronous against cross-round: times (median, runs' spread) on the left, counts on the right."""
    def draw() -> Any:
        sync, cross = (report["results"][mode]["summary"] for mode in ("synchronous", "cross_round"))
        figure, (times, counts) = new_figure(WIDTH, 3.4, ncols=2, width_ratios=[1.4, 1])
        sync_t, sync_err = median_and_spread([sync[k] for k in ROUNDS_TIMES])
        cross_t, cross_err = median_and_spread([cross[k] for k in ROUNDS_TIMES])
        handles = grouped_bars(times, ROUNDS_TIMES, [(labels["synchronous"], SYNC, sync_t),
                                           (labels["cross_round"], CROSS, cross_t)], [sync_err, cross_err])
        times.set_yticklabels([labels[k] for k in ROUNDS_TIMES])
        times.set_xlabel(labels["ms"])
        grouped_bars(counts, ROUNDS_COUNTS, [(labels["synchronous"], SYNC, [sync[k]["median"] for k in
                                                                             ROUNDS_COUNTS]),
                                             (labels["cross_round"], CROSS, [cross[k]["median"] for k in
                                                                             ROUNDS_COUNTS])])
        counts.set_yticklabels([labels[k] for k in ROUNDS_COUNTS])
        counts.set_xlabel(labels["count"])
        figure.legend(handles=handles, loc="outside lower center", ncols=2)
        figure.suptitle(chart_title(labels, report))
        return figure

    return draw_svg(draw)


def speculative_points(report: Report) -> list[tuple[str, int, dict[str, Any]]]:
    """``(draft, width, result)`` for every speculative configuration (not the plain baseline)."""
    points = []
    for key, result in report["results"].items():
        if key != "plain":
            draft, width = key.rsplit(" k=", 1)
            points.append((draft, int(width), result))
    return points


def speculative_chart(report: Report, labels: Labels) -> str:
    """Time relative to plain decoding, and forwards per token, against the acceptance rate."""
    def draw() -> Any:
        plain = report["results"]["plain"]["wall_ms"]["median"]
        figure, (cost, forwards) = new_figure(WIDTH, 5.0, ncols=2)
        widths = sorted({w for _, w, _ in speculative_points(report)})
        colors = {w: c for w, c in zip(widths, (SYNC, CROSS, "#2ca02c", "#d62728"))}
        for draft, width, result in speculative_points(report):
            x, wall = result["acceptance"], result["wall_ms"]
            spread = [[(wall["median"] - wall["min"]) / plain], [(wall["max"] - wall["median"]) / plain]]
            cost.errorbar(x, wall["median"] / plain, yerr=spread, fmt=DRAFT_MARKERS.get(draft, "o"),
                          color=colors[width], ecolor="#bbbbbb", capsize=2, markersize=6)
            forwards.scatter(x, result["target_forwards_per_token"], marker=DRAFT_MARKERS.get(draft, "o"),
                             color=colors[width])
            forwards.scatter(x, result["draft_forwards_per_token"], marker=DRAFT_MARKERS.get(draft, "o"),
                             facecolors="none", edgecolors=colors[width])
        cost.axhline(1.0, color="#555555", linestyle="--", linewidth=1, label=labels["plain"])
        cost.set_ylabel(labels["relative_time"])
        forwards.set_ylabel(labels["forwards_per_token"])
        for ax in (cost, forwards):
            ax.set_xlabel(labels["acceptance"])
            ax.set_xlim(-0.05, 1.05)
        figure.legend(handles=speculative_legend(report, colors, labels), loc="outside lower center", ncols=2)
        figure.suptitle(chart_title(labels, report))
        return figure

    return draw_svg(draw)


def speculative_legend(report: Report, colors: dict[int, str], labels: Labels) -> list[Any]:
    from matplotlib.lines import Line2D

    drafts = sorted({d for d, _, _ in speculative_points(report)}, key=list(DRAFT_MARKERS).index)
    handles = [Line2D([], [], color="#555555", marker=DRAFT_MARKERS[d], linestyle="none",
                      label=labels.get(f"draft_{d}", d)) for d in drafts]
    handles += [Line2D([], [], color=c, marker="o", linestyle="none", label=labels["width"].format(k=w))
                for w, c in colors.items()]
    handles += [Line2D([], [], color="#555555", marker="o", linestyle="none", label=labels["target_filled"]),
                Line2D([], [], color="#555555", marker="o", markerfacecolor="none", linestyle="none",
                       label=labels["draft_hollow"]),
                Line2D([], [], color="#555555", linestyle="--", label=labels["plain"])]
    return handles


def transformers_chart(report: Report, labels: Labels) -> str:
    """Our engine against transformers: prefill seconds per prompt length, decode tokens/s per batch size."""
    def draw() -> Any:
        ours, theirs = report["ours"], report["transformers_side"]
        lengths, batches = tuple(ours["prefill"]), tuple(ours["decode"])
        figure, (prefill, decode) = new_figure(WIDTH, 3.2, ncols=2)
        ours_p, ours_err = median_and_spread([ours["prefill"][n] for n in lengths])
        theirs_p, theirs_err = median_and_spread([theirs["prefill"][n] for n in lengths])
        handles = grouped_bars(prefill, lengths, [(labels["ours"], OURS, ours_p),
                                        (labels["transformers"], THEIRS, theirs_p)], [ours_err, theirs_err])
        prefill.set_yticklabels([labels["prompt_tokens"].format(n=n) for n in lengths])
        prefill.set_xlabel(labels["prefill_s"])
        speeds = [[side["decode"][b]["tokens_per_s"] for b in batches] for side in (ours, theirs)]
        grouped_bars(decode, batches, [(labels["ours"], OURS, speeds[0]),
                                       (labels["transformers"], THEIRS, speeds[1])])
        decode.set_yticklabels([labels["batch"].format(n=b) for b in batches])
        decode.set_xlabel(labels["tokens_per_s"])
        figure.legend(handles=handles, loc="outside lower center", ncols=2)
        figure.suptitle(chart_title(labels, report))
        return figure

    return draw_svg(draw)
