"""What this project has run, where, on which commit and how: the one source of its claims about itself.

Scope: reads the committed run records (``snippets/records/*.json``, with their ``provenance.json``) and
benchmark reports (``snippets/bench/**/*.json``, with the ``provenance.json`` beside them) and writes, in
Chinese and in English, the short texts the pages include: a table of what ran on which device, commit and
execution mode (``status/table.*.md``), one sentence on the accelerator runs and the graph path
(``status/gpu.*.md``) and one sentence on all the records (``status/records.*.md``). The READMEs cannot
include a snippet, so they carry the records sentence between ``<!-- status:records -->`` markers;
``python -m site_scripts.records.gen_status --readmes`` rewrites that block and
``tests/test_status_claims.py`` checks that it is current. When the next GPU run is committed, regenerating
updates every one of these sentences.
Non-scope: what a record measured (``gen_records.py``, ``gen_performance.py``, ``gen_rounds.py``), and any
claim about a device, commit or mode that no committed file records.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from site_scripts.build.common import ROOT, SNIPPETS, read_json

RECORDS = SNIPPETS / "records"
BENCH = SNIPPETS / "bench"
LANGS = ("zh", "en")
READMES = {"zh": ROOT / "README.md", "en": ROOT / "README.en.md"}
README_BLOCK = re.compile(r"(<!-- status:records -->\n)(.*?)(\n<!-- /status:records -->)", re.S)
KIND = {
    "record": ("run record", "run records", "份运行记录"),
    "bench": ("benchmark report", "benchmark reports", "份基准报告"),
    "trained": ("measurement of the trained models", "measurements of the trained models",
                "份训练模型的测量"),
}
# the committed measurement of the two trained models (python -m training.measure): CPU, their own weights
TRAINED_MEASUREMENTS = (ROOT / "trained" / "measurements.json",)
MODE = {
    "eager": ("eager", "eager 执行"),
    "graphs": ("graphs captured", "捕获了图"),
    "static": ("static buffers, nothing captured", "静态缓冲区，未捕获图"),
    "unknown": ("not recorded", "未记录"),
}
ACCELERATORS = {"cuda": ("a CUDA GPU", "CUDA GPU"), "npu": ("an Ascend NPU", "Ascend NPU")}


@dataclass(frozen=True)
class Run:
    """One committed file: what kind it is, the device it ran on, its commit, how it ran and its weights."""

    name: str
    kind: str  # "record" or "bench"
    device_type: str  # "cpu", "cuda", "npu"
    device_name: str
    commit: str  # the first 7 hex digits of source_sha
    mode: str  # a key of MODE
    random_weights: bool


def _provenance(folder: Path, section: str) -> dict[str, dict[str, str]]:
    path = folder / "provenance.json"
    return read_json(path).get(section, {}) if path.exists() else {}


def _mode(data: dict, filled: dict[str, str]) -> str:
    """eager, graphs (captured on a device), static (graph layout on a CPU) or unknown."""
    if filled.get("execution", "").startswith("eager"):
        return "eager"
    execution = data.get("execution") or data.get("config", {}).get("execution")
    if not isinstance(execution, dict):
        return "unknown"
    if not execution.get("graphs"):
        return "eager"
    return "graphs" if execution.get("captured") or data["device"]["type"] != "cpu" else "static"


def _random_weights(data: dict, filled: dict[str, str]) -> bool:
    """Bench reports build their models from a preset (random); a record says so in its weights text."""
    if "preset" in data.get("config", {}):
        return True
    return "random" in (filled.get("model.weights") or data.get("model", {}).get("weights") or "")


def _run(path: Path, kind: str, filled: dict[str, str]) -> Run | None:
    """The file as a run; None for a JSON file that is no report or record (a manifest, say)."""
    data = read_json(path)
    if not isinstance(data, dict) or not {"device", "source_sha"} <= set(data):
        return None
    device = data["device"]
    return Run(path.name, kind, device["type"], device.get("name") or device["type"],
               data["source_sha"]["sha"][:7], _mode(data, filled), _random_weights(data, filled))


def runs() -> list[Run]:
    """Every committed run record and benchmark report, in path order."""
    found = []
    filled = _provenance(RECORDS, "records")
    for path in sorted(RECORDS.glob("*.json")):
        if path.name != "provenance.json":
            found.append(_run(path, "record", filled.get(path.name, {})))
    for path in sorted(BENCH.rglob("*.json")):
        if path.name != "provenance.json":
            found.append(_run(path, "bench", _provenance(path.parent, "reports").get(path.name, {})))
    found.extend(_trained(path) for path in TRAINED_MEASUREMENTS if path.exists())
    return [run for run in found if run is not None]


def _trained(path: Path) -> Run:
    """A measurement of the committed trained models: it ran on a CPU (the record names which) in eager mode,
    on the trained weights, never random ones."""
    data = read_json(path)
    return Run(path.name, "trained", "cpu", data["cpu"], data["commit"][:7], "eager", random_weights=False)


def _count(items: Iterable[Run], lang: str) -> str:
    """``3 run records and 2 benchmark reports`` / ``3 份运行记录、2 份基准报告``."""
    items = list(items)
    parts = []
    for kind, (one, many, zh) in KIND.items():
        n = sum(r.kind == kind for r in items)
        if n:
            parts.append(f"{n} {zh}" if lang == "zh" else f"{n} {one if n == 1 else many}")
    return "、".join(parts) if lang == "zh" else _joined(parts, lang)


def _groups(items: Iterable[Run]) -> dict[tuple[str, str, str, str], list[Run]]:
    """(device type, device name, commit, mode) -> runs, accelerators only."""
    groups: dict[tuple[str, str, str, str], list[Run]] = {}
    for run in items:
        if run.device_type != "cpu":
            groups.setdefault((run.device_type, run.device_name, run.commit, run.mode), []).append(run)
    return groups


def table(lang: str) -> str:
    """Device, commits, execution, how many files: one row per device and execution mode."""
    head = ("| 设备 | 提交 | 执行方式 | 文件 |\n|---|---|---|---|" if lang == "zh"
            else "| Device | Commits | Execution | Files |\n|---|---|---|---|")
    rows: dict[tuple[str, str], list[Run]] = {}
    for run in runs():
        device = "CPU" if run.device_type == "cpu" else run.device_name
        rows.setdefault((device, run.mode), []).append(run)
    lines = []
    for (device, mode), items in sorted(rows.items()):
        commits = ", ".join(f"`{c}`" for c in sorted({r.commit for r in items}))
        lines.append(f"| {device} | {commits} | {MODE[mode][lang == 'zh']} | {_count(items, lang)} |")
    return "\n".join([head, *lines]) + "\n"


def _ran(items: list[Run], lang: str) -> list[str]:
    """One phrase per accelerator group: what ran on it, at which commit, how."""
    phrases = []
    for (_, name, commit, mode), group in _groups(items).items():
        if lang == "zh":
            phrases.append(f"一块 {name} 上提交 `{commit}` 的 {_count(group, lang)}（{MODE[mode][1]}）")
        else:
            phrases.append(f"{_count(group, lang)} from one {name} at commit `{commit}` ({MODE[mode][0]})")
    return phrases


def _never(items: list[Run], lang: str) -> list[str]:
    """What has never run: the graph path on each accelerator, and anything at all on one."""
    said = []
    for device_type, (en, zh) in ACCELERATORS.items():
        on_it = [r for r in items if r.device_type == device_type]
        if not on_it:
            said.append(f"{zh} 上什么都还没有运行过" if lang == "zh" else f"nothing has run on {en}")
        elif not any(r.mode == "graphs" for r in on_it):
            said.append(f"图执行还没有在 {zh} 上运行过" if lang == "zh"
                        else f"graph execution has never run on {en}")
    return said


def _joined(parts: list[str], lang: str) -> str:
    if lang == "zh":
        return "，".join(parts)
    if len(parts) < 2:
        return "".join(parts)
    return ", ".join(parts[:-1]) + (", and " if len(parts) > 2 else " and ") + parts[-1]


def gpu_sentence(lang: str) -> str:
    """Which accelerator runs are committed, and what has never run on one."""
    items = runs()
    ran, never = _ran(items, lang), _never(items, lang)
    if lang == "zh":
        head = f"仓库里加速器上的运行只有{'；'.join(ran)}" if ran else "仓库里没有加速器上的运行"
        return f"{head}；{_joined(never, lang)}。\n" if never else f"{head}。\n"
    head = (f"The only accelerator runs committed here are {'; '.join(ran)}" if ran
            else "No accelerator run is committed here")
    return f"{head}; {_joined(never, lang)}.\n" if never else f"{head}.\n"


def records_sentence(lang: str) -> str:
    """All committed files in one sentence: CPU, accelerators, what never ran, and the weights."""
    items = runs()
    cpu = [r for r in items if r.device_type == "cpu"]
    weights = _weights(items, lang)
    if lang == "zh":
        ran = "；".join([f"CPU 上的 {_count(cpu, lang)}", *_ran(items, lang)])
        return f"仓库里已提交的有：{ran}；{_joined([*_never(items, lang), weights], lang)}。\n"
    ran = "; ".join([f"{_count(cpu, lang)} from a CPU", *_ran(items, lang)])
    rest = _joined([*_never(items, lang), weights], lang)
    return f"Committed so far: {ran}. {rest[0].upper()}{rest[1:]}.\n"


def _weights(items: list[Run], lang: str) -> str:
    """Which files ran random weights and which trained ones, by kind: ``every model had random weights``
    while no file used trained weights."""
    trained = [r for r in items if not r.random_weights]
    if not trained:
        return "所有模型都是随机权重" if lang == "zh" else "every model had random weights"
    kinds = [kind for kind in KIND if any(r.kind == kind for r in trained)]
    if lang == "zh":
        named = "和".join(KIND[kind][2].removeprefix("份") for kind in kinds)
        return f"只有{named}用的是训练过的权重，其余都是随机权重"
    named = " and ".join(KIND[kind][1] if sum(r.kind == kind for r in trained) > 1 else KIND[kind][0]
                         for kind in kinds)
    return f"only the {named} used trained weights, every other file random ones"


def readme_blocks_current() -> dict[str, bool]:
    """Language -> whether that README's status block holds the generated records sentence."""
    result = {}
    for lang, path in READMES.items():
        match = README_BLOCK.search(path.read_text(encoding="utf-8"))
        result[lang] = bool(match) and match.group(2) + "\n" == records_sentence(lang)
    return result


def write_readmes() -> None:
    """Rewrite the status block of each README with the generated records sentence."""
    for lang, path in READMES.items():
        text = path.read_text(encoding="utf-8")
        sentence = records_sentence(lang).rstrip("\n")
        new, found = README_BLOCK.subn(lambda m, s=sentence: m.group(1) + s + m.group(3), text)
        if not found:
            raise SystemExit(f"error: {path.name} has no <!-- status:records --> block")
        path.write_text(new, encoding="utf-8", newline="\n")


def _per_lang(function: Callable[[str], str], lang: str) -> Callable[[], str]:
    return lambda: function(lang)


OUTPUTS: dict[str, Callable[[], str]] = {
    f"status/{name}.{lang}.md": _per_lang(function, lang)
    for name, function in (("table", table), ("gpu", gpu_sentence), ("records", records_sentence))
    for lang in LANGS
}

if __name__ == "__main__":
    if sys.argv[1:] == ["--readmes"]:
        write_readmes()
    else:
        for path, render in OUTPUTS.items():
            print(f"== {path}\n{render()}", end="")
