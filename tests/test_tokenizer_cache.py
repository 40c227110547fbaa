"""The tokenizer cache folder: a cached ``tokenizer.json`` is the one a fresh build writes, and a changed
recipe is never served from it.

Scope: ``tokenizer_files.tokenizer_file`` with ``MINI_DEEPINFER_TOKENIZER_CACHE`` set to a scratch folder
and unset, and the key it files entries under. Non-scope: whether the built tokenizer encodes as Qwen's does
(``test_text.py``, ``test_random_checkpoint.py``).
"""

from __future__ import annotations

import pytest

from mini_deepinfer.tools import tokenizer_files
from mini_deepinfer.tools.tokenizer_files import CACHE_VARIABLE, TokenizerFile, cache_key, tokenizer_file

FAMILIES = sorted(tokenizer_files.TOKENIZER_RECIPES)


@pytest.fixture
def scratch_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    tokenizer_file.cache_clear()
    yield tmp_path / "cache"
    tokenizer_file.cache_clear()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_cached_tokenizer_file_is_byte_for_byte_a_fresh_build(scratch_cache, family) -> None:
    fresh = tokenizer_file(family)  # nothing cached yet: built (built_file) and written to the folder
    (entry,) = scratch_cache.iterdir()
    assert entry.name == f"{family}-{cache_key(family)}"
    tokenizer_file.cache_clear()
    read_back = tokenizer_file(family)  # as a later process reads it: from the folder
    assert read_back == fresh
    assert len(read_back.added_ids) == len(tokenizer_files.TOKENIZER_RECIPES[family].added_tokens)
    first = read_back.added_ids[0]
    assert read_back.added_ids == tuple(range(first, first + len(read_back.added_ids)))  # in recipe order


def test_the_key_changes_with_the_recipe_source_and_the_tokenizers_version(monkeypatch) -> None:
    keys = {family: cache_key(family) for family in FAMILIES}
    assert len(set(keys.values())) == len(FAMILIES)
    source = tokenizer_files.Path(tokenizer_files.__file__).read_bytes()
    real_read = tokenizer_files.Path.read_bytes

    def edited(path):  # this module's source as if one character of a pattern changed
        data = real_read(path)
        return data.replace(b"\\p{N}", b"\\p{Nd}", 1) if data == source else data

    monkeypatch.setattr(tokenizer_files.Path, "read_bytes", edited)
    assert all(cache_key(family) != keys[family] for family in FAMILIES)
    monkeypatch.undo()
    monkeypatch.setattr(tokenizer_files.tokenizers, "__version__", "0.0.0")
    assert all(cache_key(family) != keys[family] for family in FAMILIES)


def test_a_half_written_entry_is_built_again(scratch_cache) -> None:
    family = "r1-distill-qwen"  # the smaller build
    entry = scratch_cache / f"{family}-{cache_key(family)}"
    entry.mkdir(parents=True)
    (entry / "tokenizer.json").write_text("{", encoding="utf-8")  # no added_ids.json beside it
    rebuilt = tokenizer_file(family)
    assert rebuilt.text.startswith('{"version"') and len(rebuilt.added_ids) == 22
    # the broken entry was replaced by a whole one
    assert (entry / "tokenizer.json").read_text(encoding="utf-8") == rebuilt.text
    assert (entry / "added_ids.json").is_file()


def test_unset_nothing_is_written(monkeypatch) -> None:
    monkeypatch.delenv(CACHE_VARIABLE, raising=False)

    def refuse(entry, built):
        raise AssertionError(f"wrote a cache entry at {entry} with the variable unset")

    monkeypatch.setattr(tokenizer_files, "_write_cached", refuse)
    tokenizer_file.cache_clear()
    try:
        assert isinstance(tokenizer_file("r1-distill-qwen"), TokenizerFile)
    finally:
        tokenizer_file.cache_clear()
