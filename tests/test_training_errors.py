"""The training and measuring commands refuse as the engine's commands do, and never leave half a file.

Scope: ``python -m training`` and ``python -m training.measure`` run in this process (``main(argv)``) on a
temporary cache and output folder: a substituted corpus archive, a missing OpenCC or another missing package,
a full disk while a checkpoint or a model folder is written, and Ctrl-C in the middle of training each end in
exactly one line on stderr (exit code 2, or 130 for Ctrl-C) and no traceback; what was there before stays as
it was, and no partial file or hidden folder is left. Training runs on the committed excerpt
(``tests/data/corpus-excerpt.txt``) with a tiny shape, a few steps at most.

Non-scope: the corpora themselves (never downloaded here) and what training computes
(``tests/test_trained_models.py``).
"""

from __future__ import annotations

import errno
import io
import json
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from training import corpora, loop, run
from training.__main__ import main
from training.measure import main as measure_main
from training.record import write_model
from training.tokenizer import token_stream, train_tokenizer

EXCERPT = Path(__file__).parent / "data" / "corpus-excerpt.txt"
TINY_SHAPE = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                  head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=16,
                  linear_value_head_dim=16, layer_types=["linear_attention", "full_attention"])


@pytest.fixture(autouse=True)
def same_threads() -> Iterator[None]:
    """The training command sets torch's thread count for the process; give the other tests theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's stderr, which must be exactly one line starting with ``error:`` (besides transformers'
    notices that its Qwen3.5 runs on reference kernels, which the first forward pass of a process logs)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("[transformers] ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    """Hidden or partial files and folders anywhere under ``folder``."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.name.startswith(".") or "partial" in p.name)


def excerpt_text(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The command trains a tiny target on the excerpt (both 'languages'), its scratch weights in tmp."""
    documents = EXCERPT.read_text(encoding="utf-8").split("\n\n") * 6
    tokenizer = train_tokenizer(documents, vocab_size=400)
    stream = token_stream(tokenizer, documents)
    corpus = corpora.Corpus({}, {}, {}, {"en": "excerpt", "zh": "excerpt"})
    text = run.Prepared(corpus, tokenizer, {"en": stream, "zh": stream}, {"held_out_en": stream}, {})
    monkeypatch.setattr(run, "prepare", lambda limit_docs=None: text)
    monkeypatch.setattr(loop, "TARGET_SHAPE", TINY_SHAPE)
    monkeypatch.setattr(run, "RUN_CACHE", tmp_path / "train-run")


def test_a_substituted_archive_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "corpora"
    cache.mkdir()
    (cache / corpora.SHAKESPEARE.file).write_bytes(b"not the pinned archive")
    monkeypatch.setattr(corpora, "CACHE", cache)
    assert main(["--smoke", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys)
    assert corpora.SHAKESPEARE.file in line and corpora.SHAKESPEARE.sha256 in line, line
    assert not (tmp_path / "out").exists()


def test_an_unreadable_archive_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.tgz"
    broken.write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(corpora.CorpusError, match="cannot read the archive"):
        corpora.shakespeare_documents(broken)


def test_a_registry_client_that_cannot_run_is_one_line_and_leaves_no_download(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no npm to run
    with pytest.raises(corpora.CorpusError, match="cannot fetch chinese-poetry@2.0.1: cannot run npm"):
        corpora.fetch(corpora.CHINESE_POETRY, tmp_path / "corpora")
    assert list((tmp_path / "corpora").iterdir()) == []


def tang_archive(folder: Path) -> Path:
    """A tiny npm-style archive with one file of Tang poems."""
    data = json.dumps([{"title": "春望", "author": "杜甫", "paragraphs": ["國破山河在"]}]).encode()
    path = folder / "poetry.tgz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("package/quantangshi/poet.tang.0.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_a_missing_opencc_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    archive = tang_archive(tmp_path)
    monkeypatch.setitem(sys.modules, "opencc", None)  # import opencc now fails as if it were not installed
    monkeypatch.setattr(run, "prepare", lambda limit_docs=None: corpora.tang_documents(archive))
    assert main(["--smoke", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys)
    assert "OpenCC is not installed" in line and ".[train]" in line, line


def test_a_missing_package_is_one_line_naming_its_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "trained"
    for name in ("target", "draft"):
        (folder / name).mkdir(parents=True)
        (folder / name / "config.json").write_text("{}")

    def measure(_folder: Path) -> dict:
        from transformers import Qwen3_5TextConfig  # noqa: F401  (as measure's transformers models do)

        return {}

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails as if not installed
    monkeypatch.setattr("training.measure.measure", measure)
    assert measure_main([str(folder)]) == 2
    line = one_error_line(capsys)
    assert "need transformers" in line and ".[parity]" in line, line
    assert not (folder / "measurements.json").exists()


def full_disk(*_args: object, **_kwargs: object) -> None:
    """A write that meets a full disk after it has begun: some bytes are out, then ENOSPC."""
    path = Path(str(_args[1]))
    path.write_bytes(b"half")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_saving_a_checkpoint_is_one_line_and_leaves_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import safetensors.torch

    excerpt_text(monkeypatch, tmp_path)
    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    assert main(["--smoke", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys)
    assert line.startswith("error: no space left on device") and "target-step3.safetensors" in line, line
    assert list((tmp_path / "train-run").iterdir()) == []
    assert not (tmp_path / "out").exists()


def tiny_model_and_tokenizer():
    documents = EXCERPT.read_text(encoding="utf-8").split("\n\n")
    tokenizer = train_tokenizer(documents, vocab_size=300)
    config = loop.model_config(TINY_SHAPE, tokenizer.get_vocab_size(), [0, 1])
    return loop.new_model(config, seed=0), tokenizer


@pytest.mark.parametrize("stop", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()],
                         ids=["full disk", "Ctrl-C"])
def test_a_model_folder_is_replaced_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        stop: BaseException) -> None:
    """A stop after the weights are written, before the tokenizer's config: the old folder stays as it was."""
    model, tokenizer = tiny_model_and_tokenizer()
    folder = tmp_path / "target"
    folder.mkdir()
    (folder / "training.json").write_text("the old record\n")

    def stopped(_tokenizer: object) -> dict:
        raise stop

    monkeypatch.setattr("training.record.tokenizer_config", stopped)
    with pytest.raises((ValueError, KeyboardInterrupt)) as caught:
        write_model(model, tokenizer, folder, {"seed": 0})
    if isinstance(stop, OSError):
        assert str(caught.value).startswith("no space left on device"), caught.value
    assert [p.name for p in folder.iterdir()] == ["training.json"]
    assert (folder / "training.json").read_text() == "the old record\n"
    assert leftovers(tmp_path) == []


def test_ctrl_c_mid_training_is_one_line_exit_130_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    excerpt_text(monkeypatch, tmp_path)
    steps, next_token_loss = [], loop.next_token_loss

    def interrupted(model, x: torch.Tensor) -> torch.Tensor:
        steps.append(len(steps))
        if len(steps) == 2:
            raise KeyboardInterrupt  # Ctrl-C during the second step
        return next_token_loss(model, x)

    monkeypatch.setattr(loop, "next_token_loss", interrupted)
    try:
        code = main(["--smoke", str(tmp_path / "out")])
    except KeyboardInterrupt:  # let pytest report it as this test's failure, not as the user stopping pytest
        pytest.fail("Ctrl-C left the command as an exception, not as exit code 130")
    assert code == 130
    assert one_error_line(capsys) == "error: interrupted"
    assert steps == [0, 1]
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path) == []

