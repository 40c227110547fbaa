"""The performance page's CPU tables: one per kind of CPU, each held to today's goals, each with a paragraph
made from its own numbers (``site_scripts/performance/gen_performance.py``).

Non-scope: the numbers themselves (measured by ``python -m mini_deepinfer.bench`` and committed as they came)
and whether the rendered snippets are current (``test_snippets_current``).
"""

from __future__ import annotations

import copy
import re
import shlex

import pytest

from mini_deepinfer.bench.__main__ import TARGETS
from site_scripts.build.common import SNIPPETS, read_json
from site_scripts.performance import cpu_reading, gen_performance

KINDS = gen_performance.CPU_KINDS
PAGES = [("docs/performance/index.en.md", ".md"), ("docs/performance/index.md", ".zh.md")]
INCLUDE = re.compile(r'^--8<-- "([^"]+)"\n', re.M)


@pytest.fixture(params=KINDS)
def report(request):
    return read_json(SNIPPETS / "bench" / f"{request.param}.json")


def test_each_cpu_kind_has_its_json_and_its_table_and_paragraph_on_both_pages() -> None:
    for name in KINDS:
        assert (SNIPPETS / "bench" / f"{name}.json").is_file()
    pages = {"en": "docs/performance/index.en.md", "zh": "docs/performance/index.md"}
    for lang, page in pages.items():
        text = (SNIPPETS.parent / page).read_text(encoding="utf-8")
        for name in KINDS:
            suffix = ".md" if lang == "en" else ".zh.md"
            table = text.index(f'--8<-- "snippets/bench/{name}{suffix}"')
            assert text.index(f'--8<-- "snippets/performance/{name}{suffix}"') > table, (page, name)
    devices = [read_json(SNIPPETS / "bench" / f"{name}.json")["device"] for name in KINDS]
    # A kind is the model name with the vector units the run recorded (two AMD EPYCs differ in AVX-512).
    cpus = {(device["name"], tuple(device.get("cpu_flags") or ())) for device in devices}
    assert len(cpus) == len(KINDS), "each table should be another kind of CPU"


@pytest.mark.parametrize("name", gen_performance.RESULTS)
def test_the_line_above_a_cpu_table_quotes_its_record_s_command_and_only_the_flags_it_recorded(name) -> None:
    record = read_json(SNIPPETS / "bench" / f"{name}.json")
    committed = f"snippets/bench/{name}.json"
    english, chinese = cpu_reading.run_line(record, committed)
    command, flags = record["command"], record["device"].get("cpu_flags")
    for said in (english, chinese):
        assert f"`{shlex.join(command)}`" in said and f"**{record['device']['name']}**" in said
        wrote = command[command.index("--output") + 1]
        assert (f"`{committed}`" in said) is (wrote != committed), said  # where the file went, if moved
        for flag, unit in cpu_reading.VECTOR_UNITS.items():
            shown = re.search(rf"{re.escape(unit)}(?![\w-])", said) is not None
            assert shown is (flags is not None), (unit, said)  # present or said to lack, once recorded
            if flags is not None and flag not in flags:
                assert re.search(rf"(no|没有) [^;；]*{re.escape(unit)}", said), (unit, said)
    assert ("CPU flags not recorded" in english) is (flags is None)
    assert ("没有记录 CPU 标志" in chinese) is (flags is None)


def page_text(page: str) -> str:
    return (SNIPPETS.parent / page).read_text(encoding="utf-8")


@pytest.mark.parametrize("page,suffix", PAGES)
def test_each_cpu_table_follows_its_run_line_and_no_hand_written_text_there_names_flags(page, suffix) -> None:
    text = page_text(page)
    for name in gen_performance.RESULTS:
        table = text.index(f'--8<-- "snippets/bench/{name}{suffix}"')
        before = text[:table]
        run = f"snippets/performance/{name}-run{suffix}"
        # the stretch that leads to this table: from the last heading or included piece other than its line
        start = max(before.rfind("\n#"), *(m.end() for m in INCLUDE.finditer(before) if m[1] != run))
        stretch = before[start:]
        assert f'--8<-- "{run}"' in stretch, (page, name)
        own = INCLUDE.sub("", stretch)  # the page's own words, which may not describe the CPU or the command
        assert not re.search(r"AVX|AMX|--output", own), (page, name, own)


@pytest.mark.parametrize("page,suffix", PAGES)
def test_the_opening_names_every_included_snippet_that_is_not_rendered_from_a_record(page, suffix) -> None:
    text = page_text(page)
    opening = text[: text.index("\n## ")]
    for match in INCLUDE.finditer(text):
        path = match[1]
        if not path.startswith("snippets/"):
            continue  # a section of code, shown as it is
        folder, stem = path.rsplit("/", 1)
        stem = re.sub(r"(-run)?(\.zh|\.en)?\.md$", "", stem)
        record = SNIPPETS.parent / folder.replace("snippets/performance", "snippets/bench") / f"{stem}.json"
        assert record.is_file() or f"`{path}`" in opening, (page, path)


def test_the_paragraph_under_a_table_is_made_of_its_numbers(report) -> None:
    report = dict(report, targets=gen_performance.targets_of(report))
    english, chinese = cpu_reading.reading(report)
    for batch, speedup in report["comparison"]["decode_speedup"].items():
        assert f"{speedup:.2f}x" in english and f"transformers 的 {speedup:.2f} 倍" in chinese, batch
    step_ms = report["ours"]["decode"]["1"]["step_s"]["median"] * 1000
    assert f"{step_ms:.1f} ms" in english and f"{step_ms:.1f} 毫秒" in chinese
    missed = [t for t in report["targets"].values() if t["met"] is False]
    for target in missed:
        assert target["what"] in english
    measured = sum(t["met"] is not None for t in report["targets"].values())
    assert f"Of the {measured} goals measured, {measured - len(missed)} " in english
    kept = (r"transformers|roofline|prefill|decode|batch|token|GB/s|AVX\w*|b?float\d+|eager"
            r"|--compile|--graphs|torch")
    words = re.sub(kept, "", chinese.replace(report["device"]["name"], ""))
    assert not re.search(r"[A-Za-z]{4,}", words), f"English left in: {chinese}"


def test_each_missed_decode_goal_is_set_against_both_sides_matrix_products(report) -> None:
    report = dict(report, targets=gen_performance.targets_of(report))
    english, chinese = cpu_reading.reading(report)
    for batch in report["comparison"]["decode_speedup"]:
        target = report["targets"][f"decode_batch{batch}_vs_transformers"]
        theirs = report["transformers_side"]
        need_ms = theirs["decode"][batch]["step_s"]["median"] / target["threshold"] * 1000
        floors_ms = [side["linear_floor"][batch]["all_s"]["median"] * 1000
                     for side in (report["ours"], theirs)]
        missed = target["met"] is False
        said = (f"At batch {batch}, {target['threshold']}x would need a step of {need_ms:.1f} ms; every "
                f"linear layer once took {floors_ms[0]:.1f} ms on our side and {floors_ms[1]:.1f} ms on "
                "transformers'")
        assert (said in english) is missed, batch
        zh_said = f"batch {batch} 要到 {target['threshold']} 倍，一步得在 {need_ms:.1f} 毫秒内"
        assert (zh_said in chinese) is missed, batch
    met = copy.deepcopy(report)
    met["comparison"]["decode_speedup"] = {batch: 2.5 for batch in met["comparison"]["decode_speedup"]}
    met = dict(met, targets=gen_performance.targets_of(met))
    assert "would need a step of" not in cpu_reading.reading(met)[0]


def test_another_number_gives_another_paragraph_and_goals_are_today_s(report) -> None:
    changed = copy.deepcopy(report)
    changed["comparison"]["decode_speedup"]["1"] = 9.87
    changed = dict(changed, targets=gen_performance.targets_of(changed))
    assert set(changed["targets"]) == set(TARGETS)
    english, _ = cpu_reading.reading(changed)
    assert "9.87x transformers' tokens per second at batch 1" in english
    assert changed["targets"]["decode_batch1_vs_transformers"]["met"] is True
    assert "decode tok/s at batch 1" not in english.split("not met")[-1]


def test_the_variants_sentences_are_made_of_their_numbers_or_say_none_ran(report) -> None:
    english, chinese = cpu_reading.variants_reading(report)
    variants = {(v["spec"]["dtype"], v["spec"]["execution"]): v
                for v in (report.get("variants") or {}).values() if v["spec"]["engine"] == "ours"}
    if not variants:
        assert english == " This run measured no bfloat16, graph-path or compiled variant."
        assert chinese == "这次运行没有测 bfloat16、图路径或编译的变体。"
        return
    def listed(speedups: dict[str, float]) -> tuple[str, str]:
        return (", ".join(f"{v:.2f}x at batch {b}" for b, v in speedups.items()),
                "，".join(f"batch {b} 时 {v:.2f} 倍" for b, v in speedups.items()))

    said = [(("bfloat16", "eager"), "ours", "against our float32: ", "相对我们的 float32："),
            (("bfloat16", "eager"), "transformers", "against transformers' bfloat16: ",
             "相对 transformers 的 bfloat16："),
            (("float32", "compiled"), "ours", "(`--compile`), against our eager float32 steps: ",
             "编译后（`--compile`），我们 decode 每秒的 token 数相对 eager 的 float32："),
            (("float32", "graphs"), "ours", "nothing captured on a CPU), against our eager float32 steps: ",
             "在 CPU 上不捕获）时，我们 decode 每秒的 token 数相对 eager 的 float32：")]
    for key, against, words, zh_words in said:  # each figure next to what it is measured against
        if key in variants:
            en, zh = listed(variants[key]["comparison"][against]["decode_speedup"])
            assert words + en in english and zh_words + zh in chinese, (key, against)
    compiled = variants.get(("float32", "compiled"))
    if compiled is not None:
        seconds = compiled["capture_s"]
        assert f"after {seconds['min']:.0f} to {seconds['max']:.0f} s of compiling" in english
        batch = min(compiled["decode"], key=int)
        saved = (report["ours"]["decode"][batch]["step_s"]["median"]
                 - compiled["decode"][batch]["step_s"]["median"])
        if saved > 0:
            rounded = float(f"{seconds['min'] / saved:.2g}")  # two significant figures, as the page
            steps = f"{rounded:,.0f}"
            assert f"A compiled step at batch {batch} saved {saved * 1000:.1f} ms" in english
            assert f"took about {steps} decode steps to pay back" in english and f"大约 {steps} 个" in chinese
    graphs = variants.get(("float32", "graphs"))
    if graphs is not None:
        eager_faster = max(graphs["comparison"]["ours"]["decode_speedup"].values()) < 1
        assert ("Eager, the default, was the faster of the two at every batch." in english) is eager_faster
        assert ("每个 batch 都是 eager（默认）更快。" in chinese) is eager_faster
        one_win = copy.deepcopy(report)
        name = next(n for n, v in one_win["variants"].items() if v["spec"]["execution"] == "graphs")
        speedups = one_win["variants"][name]["comparison"]["ours"]["decode_speedup"]
        speedups[next(iter(speedups))] = 1.02
        assert "Eager, the default" not in cpu_reading.variants_reading(one_win)[0]
