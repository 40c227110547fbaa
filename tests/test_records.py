"""Run records: the keys the command-line contract promises, atomic writes, early path checks, provenance."""

from __future__ import annotations

import enum
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from importlib import metadata
from pathlib import Path

import pytest

from mini_deepinfer.tools import records
from mini_deepinfer.tools.records import (
    RECORD_KEYS,
    SCHEMA_VERSION,
    RecordError,
    RunRecord,
    check_output_path,
    package_version,
    source_sha,
    utc_now_iso,
    write_record,
)

# The keys design.md section 7 lists for every run record.
CONTRACT_KEYS = {
    "schema", "command", "config", "model", "device", "source_sha", "started_at", "requests", "cache",
    "checks", "timings",
}

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def files_in(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def filled_record() -> RunRecord:
    record = RunRecord(command=["python", "-m", "mini_deepinfer.generate", "--output", "run.json"])
    record.config = {"device": "cpu", "dtype": "float32", "max_new_tokens": 4}
    record.device = {"type": "cpu", "name": "test cpu"}
    record.model = records.model_info(Path("weights/tiny"), "Qwen3_5ForCausalLM", 1234, "float32")
    record.add_request(
        prompt="你好", prompt_token_ids=[1, 2], output_token_ids=[3, 4], text="世界", finish_reason="eos",
        first_token_s=0.25,
    )
    record.set_cache("target", kv_capacity=512, kv_free=512, state_capacity=4, state_free=4)
    record.add_check("check_greedy", {"passed": True, "compared_tokens": 2})
    record.timings.update(load_s=1.5, run_s=0.5)
    return record


def test_record_has_every_key_of_the_command_line_contract() -> None:
    record = filled_record().to_dict()
    assert CONTRACT_KEYS <= set(record)
    assert set(record) == set(RECORD_KEYS)
    assert list(record) == list(RECORD_KEYS)
    assert record["schema"] == SCHEMA_VERSION
    assert set(record["model"]) == {"path", "architecture", "parameter_count", "dtype"}
    assert record["model"]["path"] == os.path.join("weights", "tiny")
    assert set(record["requests"][0]) == {
        "prompt", "prompt_token_ids", "output_token_ids", "text", "finish_reason",
    }
    assert record["cache"] == {
        "target": {"kv": {"capacity": 512, "free": 512}, "state": {"capacity": 4, "free": 4}}
    }
    assert record["checks"] == {"check_greedy": {"passed": True, "compared_tokens": 2}}
    assert record["timings"] == {"load_s": 1.5, "run_s": 0.5, "first_token_s": [0.25]}


def test_speculative_figures_are_the_counts_divided_and_follow_timings_in_the_record() -> None:
    figures = records.speculative_info(verify_rounds=8, drafts_proposed=30, drafts_accepted=21)
    assert figures == {"verify_rounds": 8, "drafts_proposed": 30, "drafts_accepted": 21,
                       "accepted_per_round": 21 / 8, "acceptance_rate": 21 / 30}
    assert records.speculative_info(0, 0, 0)["accepted_per_round"] is None
    assert records.speculative_info(0, 0, 0)["acceptance_rate"] is None
    record = filled_record()
    record.speculative, record.execution = figures, {"graphs": False}
    keys = list(record.to_dict())
    assert keys[keys.index("timings") + 1:] == ["speculative", "execution"]
    assert "speculative" not in filled_record().to_dict()


def test_two_model_runs_add_draft_model_and_committed_groups() -> None:
    class Finish(str, enum.Enum):
        LENGTH = "length"

    record = filled_record()
    record.draft_model = records.model_info(None, "Qwen3_5ForCausalLM", 99, "float32")
    record.add_request(
        prompt=None, prompt_token_ids=[5], output_token_ids=[6, 7, 8], text=None, finish_reason=Finish.LENGTH,
        first_token_s=None, committed_groups=[[6, 7], [8]], seed=1234,
    )
    record.set_cache("draft", kv_capacity=64, kv_free=64, state_capacity=2, state_free=2)
    result = record.to_dict()
    assert list(result).index("draft_model") == list(result).index("model") + 1
    assert result["requests"][1]["committed_groups"] == [[6, 7], [8]]
    assert result["requests"][1]["finish_reason"] == "length"
    assert result["requests"][1]["seed"] == 1234
    assert "committed_groups" not in result["requests"][0] and "seed" not in result["requests"][0]
    assert result["timings"]["first_token_s"] == [0.25, None]
    assert set(result["cache"]) == {"target", "draft"}


def test_to_dict_is_a_copy() -> None:
    record = filled_record()
    snapshot = record.to_dict()
    snapshot["requests"][0]["output_token_ids"].append(99)
    snapshot["timings"]["first_token_s"].append(9.0)
    assert record.to_dict()["requests"][0]["output_token_ids"] == [3, 4]
    assert record.timings["first_token_s"] == [0.25]


def test_start_stamps_provenance() -> None:
    record = RunRecord.start(["prog", "--flag"], {"seed": 1}).to_dict()
    assert record["command"] == ["prog", "--flag"] and record["config"] == {"seed": 1}
    assert set(record["source_sha"]) == {"sha", "dirty"}
    started = datetime.fromisoformat(record["started_at"])
    assert abs(datetime.now(timezone.utc) - started) < timedelta(minutes=1)


def test_write_record_round_trips_utf8_in_the_given_order(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    filled_record().write(path)
    text = path.read_text(encoding="utf-8")
    assert "你好" in text and "\\u" not in text  # ensure_ascii=False
    assert text.startswith('{\n  "schema": ') and text.endswith("}\n")
    loaded = json.loads(text)
    assert loaded == filled_record().to_dict()
    assert list(loaded) == list(RECORD_KEYS)
    assert files_in(tmp_path) == ["run.json"]


def test_unencodable_value_leaves_no_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    with pytest.raises(RecordError, match="^cannot write run record: object is not JSON serialisable$"):
        write_record(path, {"schema": 1, "requests": [{"text": "ok"}, {"text": object()}]})
    assert files_in(tmp_path) == []


def test_nan_is_rejected_because_records_are_strict_json(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="cannot write run record"):
        write_record(tmp_path / "run.json", {"checks": {"max_abs_diff": float("nan")}})
    assert files_in(tmp_path) == []


def test_failed_write_keeps_the_old_file_and_removes_the_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.json"
    path.write_text('{"old": true}\n', encoding="utf-8")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(records.os, "fsync", disk_full)
    with pytest.raises(ValueError, match=f"^no space left on device .* for {path}$"):
        write_record(path, {"new": True})
    assert files_in(tmp_path) == ["run.json"]
    assert path.read_text(encoding="utf-8") == '{"old": true}\n'


def test_write_record_replaces_an_existing_record(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_record(path, {"first": 1})
    write_record(path, {"second": 2})
    assert json.loads(path.read_text(encoding="utf-8")) == {"second": 2}
    assert files_in(tmp_path) == ["run.json"]


def test_paths_and_enums_are_written_as_strings(tmp_path: Path) -> None:
    class Color(enum.Enum):
        RED = "red"

    path = tmp_path / "run.json"
    write_record(path, {"model": Path("weights") / "tiny", "color": Color.RED})
    loaded = json.loads(path.read_text(encoding="utf-8"))
    assert loaded == {"model": os.path.join("weights", "tiny"), "color": "red"}


def test_missing_folder_is_reported_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecordError) as error:
        check_output_path(Path("x/y/run.json"))
    assert str(error.value) == f"cannot write run record: folder '{Path('x/y')}' does not exist"


def test_output_path_that_is_a_folder_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="is a folder$"):
        check_output_path(tmp_path)


def test_output_path_under_a_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(RecordError, match="is not a folder$"):
        check_output_path(tmp_path / "notes.txt" / "run.json")


def test_read_only_folder_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Root may write anywhere, so the permission check is observed through os.access itself.
    monkeypatch.setattr(records.os, "access", lambda path, mode: False)
    expected = f"^cannot write run record: folder '{re.escape(str(tmp_path))}' is not writable$"
    with pytest.raises(RecordError, match=expected):
        check_output_path(tmp_path / "run.json")


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_folder_is_reported_by_the_file_system(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(RecordError, match="is not writable$"):
            check_output_path(folder / "run.json")
    finally:
        folder.chmod(0o700)


def test_output_path_in_the_current_folder_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_output_path("run.json") == Path("run.json")


def test_source_sha_outside_a_checkout_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert source_sha(tmp_path) == {"sha": None, "dirty": None}


def test_source_sha_without_git_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert source_sha(tmp_path) == {"sha": None, "dirty": None}


def git(folder: Path, *args: str) -> None:
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "-C", str(folder), *identity, *args], check=True, capture_output=True)


@needs_git
def test_source_sha_reports_the_commit_and_tracked_changes(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    assert source_sha(tmp_path) == {"sha": None, "dirty": False}  # no commit yet
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "core.py").write_text("a = 1\n")
    (tmp_path / "notes.md").write_text("notes\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "first")
    clean = source_sha(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{40}", clean["sha"]) and clean["dirty"] is False
    (tmp_path / "engine" / "new.py").write_text("")  # untracked files do not count
    assert source_sha(tmp_path)["dirty"] is False
    (tmp_path / "notes.md").write_text("changed\n")
    assert source_sha(tmp_path)["dirty"] is True
    assert source_sha(tmp_path / "engine", paths=(".",)) == clean  # only the engine folder is checked
    (tmp_path / "engine" / "core.py").write_text("a = 2\n")
    assert source_sha(tmp_path / "engine", paths=(".",))["dirty"] is True


def test_utc_now_iso_is_parseable_utc() -> None:
    stamp = datetime.fromisoformat(utc_now_iso())
    assert stamp.utcoffset() == timedelta(0)


def pyproject_beside_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    (tmp_path / "pyproject.toml").write_text(text, encoding="utf-8")
    monkeypatch.setattr(records.metadata, "version", not_installed)
    monkeypatch.setattr(records, "PACKAGE_DIR", tmp_path / "mini_deepinfer")


PYPROJECT = """\
[build-system]
requires = ["setuptools"]

[project]
name = "mini-deepinfer"
dependencies = [
  "jinja2",
]
version = "9.8.7"

[tool.other]
version = "0.0.0"
"""


def test_package_version_falls_back_to_pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pyproject_beside_package(tmp_path, monkeypatch, PYPROJECT)
    assert package_version() == "9.8.7"


def test_package_version_fallback_works_without_tomllib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyproject_beside_package(tmp_path, monkeypatch, PYPROJECT)
    monkeypatch.setitem(sys.modules, "tomllib", None)  # as on Python 3.10
    assert package_version() == "9.8.7"


def test_package_version_is_none_without_metadata_or_pyproject(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyproject_beside_package(tmp_path, monkeypatch, "not toml [")
    assert package_version() is None


# ---------------------------------------------------------------------------------------------------------
# The site's rendering of committed records (site_scripts/records/gen_records.py) and its provenance file.
# ---------------------------------------------------------------------------------------------------------


def committed_records(folder: Path, monkeypatch: pytest.MonkeyPatch, provenance: dict | None = None):
    """gen_records pointed at ``folder``, holding one record (path ``weights/Qwen3.5-2B``, no weights key)."""
    from site_scripts.records import gen_records

    record = filled_record().to_dict()
    record["model"]["path"] = "weights/Qwen3.5-2B"
    (folder / "gpu-run.json").write_text(json.dumps(record), encoding="utf-8")
    if provenance is not None:
        (folder / "provenance.json").write_text(json.dumps({"records": provenance}), encoding="utf-8")
    monkeypatch.setattr(gen_records, "RECORDS", folder)
    monkeypatch.setattr(gen_records, "PROVENANCE", folder / "provenance.json")
    monkeypatch.setattr(gen_records, "SNIPPETS", folder.parent)
    return gen_records


def test_a_record_that_does_not_say_where_its_weights_came_from_is_rendered_as_not_stated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen_records = committed_records(tmp_path, monkeypatch)
    block = gen_records.render_record(tmp_path / "gpu-run.json")
    assert "not stated in the record" in block and "execution" not in block.split("**`requests")[0]


def test_provenance_fills_what_a_record_does_not_state_and_says_where_it_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = {"model.weights": "random weights (seed 0)", "execution": "eager", "source": "shared run"}
    gen_records = committed_records(tmp_path, monkeypatch, {"gpu-run.json": entry})
    assert [path.name for path in gen_records.record_files()] == ["gpu-run.json"]  # provenance is no record
    block = gen_records.render_record(tmp_path / "gpu-run.json")
    assert f"random weights (seed 0) — {gen_records.FROM_PROVENANCE}" in block
    assert f"- `execution`: eager — {gen_records.FROM_PROVENANCE}" in block
    assert "shared run" in block
    assert "random weights (provenance.json)" in gen_records.render_index()


@pytest.mark.parametrize("entry, message", [
    ({"model.weights": "x"}, "is not a committed record"),  # under another file name, below
    ({"weights": "x"}, "keys are"),
    ({"draft_model.weights": "x"}, "has no draft_model"),
    ({"timings": "x"}, "keys are"),
])
def test_provenance_never_names_a_missing_record_an_unknown_key_or_a_missing_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: dict, message: str
) -> None:
    from site_scripts.build.common import GeneratorError

    name = "other.json" if message == "is not a committed record" else "gpu-run.json"
    gen_records = committed_records(tmp_path, monkeypatch, {name: entry})
    with pytest.raises(GeneratorError, match=message):
        gen_records.render_record(tmp_path / "gpu-run.json")


def test_provenance_cannot_override_what_the_record_states(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from site_scripts.build.common import GeneratorError

    gen_records = committed_records(tmp_path, monkeypatch, {"gpu-run.json": {"model.weights": "random"}})
    record = json.loads((tmp_path / "gpu-run.json").read_text(encoding="utf-8"))
    record["model"]["weights"] = "Qwen/Qwen3.5-2B (Hugging Face)"
    (tmp_path / "gpu-run.json").write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(GeneratorError, match="states model.weights itself"):
        gen_records.render_record(tmp_path / "gpu-run.json")


def test_a_record_with_an_execution_entry_shows_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen_records = committed_records(tmp_path, monkeypatch)
    record = json.loads((tmp_path / "gpu-run.json").read_text(encoding="utf-8"))
    record["execution"] = {"graphs": True, "captured": True, "rounds": {"graph": 3, "eager": 1}}
    (tmp_path / "gpu-run.json").write_text(json.dumps(record), encoding="utf-8")
    block = gen_records.render_record(tmp_path / "gpu-run.json")
    assert '- `execution`: graphs=true, captured=true, rounds={"graph": 3, "eager": 1}' in block


def _read_in_thread(path: Path) -> tuple[list[str], object]:
    import threading

    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(path.read_text(encoding="utf-8")), daemon=True)
    reader.start()
    return received, reader


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_record_is_written_into_a_fifo_and_the_fifo_stays(tmp_path: Path) -> None:
    fifo = tmp_path / "run.fifo"
    os.mkfifo(fifo)
    assert check_output_path(fifo) == fifo
    received, reader = _read_in_thread(fifo)
    write_record(fifo, {"schema": 1})
    reader.join(timeout=10)
    assert json.loads(received[0]) == {"schema": 1}
    assert fifo.is_fifo(), "renaming over it would have made it a regular file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.fifo"], "no temporary file left"


@pytest.mark.skipif(not Path("/dev/fd").is_dir(), reason="no /dev/fd")
def test_a_record_is_written_into_dev_fd_n_as_a_shell_process_substitution_gives_it(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        target = Path(f"/dev/fd/{write_end}")
        check_output_path(target)
        write_record(target, {"schema": 1})
        os.close(write_end)
        write_end = -1
        with os.fdopen(read_end, encoding="utf-8") as pipe:
            read_end = -1
            assert json.loads(pipe.read()) == {"schema": 1}
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() != 0, reason="making a device node needs root")
def test_a_character_device_is_written_into_and_stays_a_device(tmp_path: Path) -> None:
    import stat

    device = tmp_path / "null"  # a node of its own with the null device's numbers, never /dev/null itself
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    write_record(device, {"schema": 1})
    assert stat.S_ISCHR(device.stat().st_mode)


def test_a_long_file_name_is_written_and_one_too_long_is_refused_before_the_run(tmp_path: Path) -> None:
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    fits = tmp_path / ("r" * (limit - len(".json")) + ".json")
    write_record(fits, {"schema": 1})  # the temporary name beside it must fit as well
    assert json.loads(fits.read_text(encoding="utf-8")) == {"schema": 1}
    with pytest.raises(RecordError, match=f"file name is {limit + 1} bytes, the file system allows {limit}$"):
        check_output_path(tmp_path / ("r" * (limit + 1)))
