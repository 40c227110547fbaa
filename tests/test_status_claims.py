"""What the site and the READMEs say this project has run comes from the committed records, in one place.

Scope: ``site_scripts/records/gen_status.py`` (the table and the sentences on what ran on which device, commit
and execution mode), the README blocks it writes, the pages that include its sentences where they speak of the
project's own runs, and a list of hand-written phrasings of such claims that must not come back. Non-scope:
what the records measured (their own generators and tests), and whether the snippets are current in general
(``test_snippets_current.py``).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from site_scripts.records import gen_status

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# (page, the status snippet it must include): the places that say what ran on a GPU, an NPU or with which
# weights, in both languages
INCLUDED = [
    ("notes/graph-execution", "gpu"),
    ("performance/index", "gpu"),
    ("lessons/10-cross-round", "gpu"),
    ("guide/text-generation", "records"),
    ("guide/run-guide", "records"),
    ("records/index", "records"),
    ("records/index", "table"),
    ("records/contribute", "records"),
]
# hand-written claims about the project's own runs that went stale once; the generated sentences replace them
STALE_PHRASES = [
    r"no GPU record", r"holds no (?:Ascend 910C, )?GPU", r"only CPU records", r"has no (?:Ascend 910C, )?GPU",
    r"has not been measured yet", r"not been measured on a GPU", r"until it has been measured",
    r"还没有任何 Ascend 910C、GPU", r"只有 CPU 的记录", r"还没有测", r"收益还没有测量", r"在 GPU 上测过",
    r"Ascend 910C、GPU 或真实权重的运行记录",
    r"runs on CPU with random weights\.", r"在 CPU 上用随机权重检查", r"every model had random weights",
    r"所有模型都是随机权重",
]


def pages() -> list[Path]:
    return [*sorted(DOCS.rglob("*.md")), ROOT / "README.md", ROOT / "README.en.md"]


def page_pair(name: str) -> list[tuple[Path, str]]:
    return [(DOCS / f"{name}.md", "zh"), (DOCS / f"{name}.en.md", "en")]


@pytest.mark.parametrize("path", list(gen_status.OUTPUTS), ids=str)
def test_status_snippets_are_what_the_records_give(path: str) -> None:
    assert (ROOT / "snippets" / path).read_text(encoding="utf-8") == gen_status.OUTPUTS[path](), (
        f"snippets/{path} is stale: run `python -m site_scripts.build.regenerate --only status`")


def test_readme_status_blocks_hold_the_generated_sentence() -> None:
    stale = [lang for lang, current in gen_status.readme_blocks_current().items() if not current]
    assert not stale, (f"stale README block ({stale}): "
                       "run `python -m site_scripts.records.gen_status --readmes`")


@pytest.mark.parametrize(("name", "snippet"), INCLUDED, ids=lambda v: str(v))
def test_pages_that_speak_of_the_project_s_runs_include_the_generated_text(name: str, snippet: str) -> None:
    for page, lang in page_pair(name):
        assert f'--8<-- "snippets/status/{snippet}.{lang}.md"' in page.read_text(encoding="utf-8"), (
            f"{page.relative_to(ROOT)} does not include snippets/status/{snippet}.{lang}.md")


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_states_the_project_s_runs_by_hand(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [phrase for phrase in STALE_PHRASES if re.search(phrase, text)]
    assert not found, f"{page.relative_to(ROOT)} says by hand what gen_status derives: {found}"


def test_the_sentences_name_what_the_committed_records_hold() -> None:
    gpu = gen_status.gpu_sentence("en")
    assert "NVIDIA H200 at commit `207e234` (eager)" in gpu
    assert "graph execution has never run on a CUDA GPU" in gpu
    assert "nothing has run on an Ascend NPU" in gpu
    sentence = gen_status.records_sentence("en")
    assert "only the measurement of the trained models used trained weights" in sentence


def test_the_trained_models_measurement_counts_as_a_cpu_file_on_trained_weights() -> None:
    trained = [run for run in gen_status.runs() if run.kind == "trained"]
    assert [run.name for run in trained] == ["measurements.json"], trained
    assert not trained[0].random_weights and trained[0].device_type == "cpu"
    assert "1 measurement of the trained models" in gen_status.records_sentence("en")
    assert "1 份训练模型的测量" in gen_status.records_sentence("zh")


def _folders_with(tmp_path: Path, extra: dict) -> tuple[Path, Path]:
    records, bench = tmp_path / "records", tmp_path / "bench"
    shutil.copytree(gen_status.RECORDS, records, ignore=shutil.ignore_patterns("rendered"))
    shutil.copytree(gen_status.BENCH, bench)
    (records / "cuda-next.json").write_text(json.dumps(extra), encoding="utf-8")
    (bench / "manifest.json").write_text('{"steps": []}', encoding="utf-8")  # not a report: skipped
    return records, bench


def test_a_new_gpu_record_with_graphs_changes_every_sentence(tmp_path: Path, monkeypatch) -> None:
    record = json.loads((gen_status.RECORDS / "cpu-generate-single.json").read_text(encoding="utf-8"))
    record["device"] = {**record["device"], "type": "cuda", "name": "NVIDIA H200"}
    record["source_sha"] = {"sha": "abcdef0123456789", "dirty": False}
    record["execution"] = {"graphs": True, "captured": True, "rounds": {"graph": 14, "eager": 2}}
    records, bench = _folders_with(tmp_path, record)
    monkeypatch.setattr(gen_status, "RECORDS", records)
    monkeypatch.setattr(gen_status, "BENCH", bench)
    gpu, table = gen_status.gpu_sentence("en"), gen_status.table("en")
    assert "1 run record from one NVIDIA H200 at commit `abcdef0` (graphs captured)" in gpu
    assert "never run on a CUDA GPU" not in gpu
    assert "| NVIDIA H200 | `abcdef0` | graphs captured | 1 run record |" in table
    assert "图执行还没有在 CUDA GPU 上运行过" not in gen_status.records_sentence("zh")
