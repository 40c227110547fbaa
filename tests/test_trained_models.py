"""The trained target and draft under ``trained/`` and the command that makes them.

Scope: a few training steps of the ``training`` package on a short committed excerpt
(``tests/data/corpus-excerpt.txt``) lower the loss and write a checkpoint the engine loads; the committed
weights and tokenizer have the SHA-256 their training records quote and fit the size budget; both committed
models give the same greedy tokens in this engine and in transformers; the split and the character count
behind bits per character. Non-scope: the corpora themselves (never downloaded here) and the long training.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from training.corpora import HELD_OUT_EVERY, poem_text, split
from training.distill import PROMPT_TOKENS, opening_starts
from training.loop import Schedule, Windows, model_config, new_model, next_token_loss, residual_dropout, train
from training.record import shares_text, write_model
from training.tokenizer import token_chars, token_stream, train_tokenizer

ROOT = Path(__file__).resolve().parent.parent
TRAINED = ROOT / "trained"
EXCERPT = Path(__file__).parent / "data" / "corpus-excerpt.txt"
MODELS = ("target", "draft")
TINY_SHAPE = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                  head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=16,
                  linear_value_head_dim=16, layer_types=["linear_attention", "full_attention"])


def record(name: str) -> dict:
    return json.loads((TRAINED / name / "training.json").read_text(encoding="utf-8"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_few_training_steps_lower_the_loss_and_the_checkpoint_loads(tmp_path: Path) -> None:
    from mini_deepinfer.models.loader import load_checkpoint
    from mini_deepinfer.runtime.text import load_text

    torch.set_num_threads(1)
    text = EXCERPT.read_text(encoding="utf-8")
    documents = text.split("\n\n")
    tokenizer = train_tokenizer(documents, vocab_size=400)
    eos = [tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")]
    model = new_model(model_config(TINY_SHAPE, tokenizer.get_vocab_size(), eos), seed=0)
    windows = Windows({"excerpt": token_stream(tokenizer, documents)}, seed=0, seq_len=32)
    run = train(model, windows, Schedule(steps=30, peak_lr=1e-2, warmup=3), next_token_loss, "test")
    losses = [loss for _, loss in run["loss"]]
    assert losses[-1] < losses[0] - 0.5, losses
    write_model(model, tokenizer, tmp_path / "model", {"seed": 0})
    loaded = load_checkpoint(tmp_path / "model")
    assert loaded.config.layer_types == ("linear_attention", "full_attention")
    text_tokenizer, template, stop_ids = load_text(tmp_path / "model")
    assert template is not None and set(eos) <= set(stop_ids)
    assert text_tokenizer.decode(text_tokenizer.encode("Kent.\n帝京篇")) == "Kent.\n帝京篇"


@pytest.mark.parametrize("name", MODELS)
def test_committed_weights_and_tokenizer_have_the_sha256_of_their_record(name: str) -> None:
    folder = TRAINED / name
    assert sha256(folder / "model.safetensors") == record(name)["weights_sha256"]
    assert sha256(folder / "tokenizer.json") == record(name)["tokenizer_sha256"]


def test_both_models_share_one_tokenizer_and_fit_sixteen_megabytes() -> None:
    assert record("target")["tokenizer_sha256"] == record("draft")["tokenizer_sha256"]
    total = sum((TRAINED / name / "model.safetensors").stat().st_size for name in MODELS)
    assert total <= 16 * 10**6


@pytest.mark.parametrize("name", MODELS)
def test_the_training_record_says_how_the_model_was_made(name: str) -> None:
    made = record(name)
    for key in ("corpora", "config", "seed", "schedule", "tokens_seen", "cpu", "threads", "torch", "commit",
                "training", "scores", "parameters"):
        assert key in made, key
    assert all(len(corpus["sha256"]) == 64 for corpus in made["corpora"])
    assert made["training"]["loss"][-1][0] == made["schedule"]["steps"]
    assert {"held_out_en", "held_out_zh", "unseen_en", "unseen_zh"} <= set(made["scores"])


@pytest.mark.parametrize("name", MODELS)
def test_committed_models_give_the_same_greedy_tokens_here_and_in_transformers(name: str) -> None:
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    from mini_deepinfer.core.engine import EngineConfig
    from mini_deepinfer.core.request import SamplingParams
    from mini_deepinfer.models.loader import load_checkpoint
    from mini_deepinfer.runtime.factory import build_engine
    from mini_deepinfer.runtime.text import TextTokenizer

    torch.set_num_threads(1)
    folder = TRAINED / name
    tokenizer = TextTokenizer.from_file(folder / "tokenizer.json")
    reference = Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ours = load_checkpoint(folder, torch.float32).model
    for prompt in ("ACT II.\nScene I. A Room in the Castle.\n", "春望\n杜甫\n"):
        ids = tokenizer.encode(prompt)
        engine = build_engine(ours, EngineConfig(kv_capacity=64), batching=False)
        engine.submit("r", ids, SamplingParams(max_new_tokens=12, ignore_eos=True))
        engine.run()
        expected = greedy_reference(reference, ids, 12)
        assert engine.requests["r"].output_token_ids == expected


@torch.no_grad()
def greedy_reference(model, ids: list[int], count: int) -> list[int]:
    """transformers' model, the whole sequence each step (no cache), argmax of the last position."""
    ids = list(ids)
    for _ in range(count):
        ids.append(int(model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].argmax()))
    return ids[-count:]


def test_every_twentieth_document_is_held_out() -> None:
    documents = [str(i) for i in range(45)]
    train, held = split(documents)
    assert held == [str(HELD_OUT_EVERY - 1), str(2 * HELD_OUT_EVERY - 1)]
    assert sorted(train + held, key=int) == documents


def test_a_poem_is_its_title_author_and_lines() -> None:
    poem = {"title": "春望", "author": "杜甫", "paragraphs": ["国破山河在，城春草木深。", " "]}
    assert poem_text(poem) == "春望\n杜甫\n国破山河在，城春草木深。"


def test_bits_per_char_count_characters_not_bytes() -> None:
    tokenizer = train_tokenizer(["帝京 abc"] * 3, vocab_size=300)
    chars = token_chars(tokenizer)
    ids = tokenizer.encode("帝京 abc").ids
    assert sum(chars[i] for i in ids) == len("帝京 abc")
    assert chars[tokenizer.token_to_id("<|endoftext|>")] == 0


def test_residual_dropout_acts_only_in_training_and_its_hooks_come_off() -> None:
    torch.set_num_threads(1)
    model = new_model(model_config(TINY_SHAPE, 64, [62, 63]), seed=0)
    ids = torch.arange(16).view(1, 16)

    def twice() -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(model(input_ids=ids, use_cache=False).logits for _ in range(2))

    handles = residual_dropout(model, 0.5)
    assert len(handles) == 2 * len(TINY_SHAPE["layer_types"])  # the token mixer and the MLP of each layer
    model.train()
    first, second = twice()
    assert not torch.equal(first, second)
    model.eval()
    assert torch.equal(*twice())
    for handle in handles:
        handle.remove()
    model.train()
    assert torch.equal(*twice())


def test_each_batch_holds_the_languages_in_their_shares() -> None:
    streams = {"en": torch.zeros(4000, dtype=torch.long), "zh": torch.ones(4000, dtype=torch.long)}
    windows = Windows(streams, seed=0, seq_len=16, shares={"en": 2, "zh": 1})
    for size in (18, 8):
        rows = windows.batch(size)[:, 0]
        assert (rows == 0).sum() == size - size // 3 and (rows == 1).sum() == size // 3
    assert shares_text({"en": 2, "zh": 1}) == "2 English windows to 1 Chinese"
    assert shares_text({"en": 1, "zh": 1}) == "as many English windows as Chinese"


def test_half_the_openings_start_a_document() -> None:
    eot = 9
    stream = torch.tensor(([eot] + [1, 2, 3] * 30) * 20)
    starts = opening_starts(stream, 40, eot, torch.Generator().manual_seed(0))
    assert len(starts) == 40
    assert all(stream[s - 1] == eot and stream[s] == 1 for s in starts[:20])
    assert all(s + PROMPT_TOKENS <= len(stream) for s in starts)


def test_the_pages_give_the_trained_models_shapes_of_their_records() -> None:
    import re

    found = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for name in MODELS:
            config = record(name)["config"]
            for said in re.finditer(rf"`trained/{name}`[^)）]*?[(（]([^)）]*)[)）]", text):
                inside = said[1]
                hidden = re.search(r"hidden (\d+)", inside)
                layers = re.search(r"(\d+) (?:layers|层)", inside)
                if hidden:
                    found += 1
                    assert int(hidden[1]) == config["hidden_size"], (page.name, name, inside)
                if layers:
                    assert int(layers[1]) == len(config["layer_types"]), (page.name, name, inside)
    assert found >= 8, found  # both models on the trained-models page and lesson 12, in both languages


def test_the_recorded_rerun_checked_the_committed_target() -> None:
    """``trained/target-check.json`` compared its rerun with the figures of the target's own record."""
    check, made = json.loads((TRAINED / "target-check.json").read_text(encoding="utf-8")), record("target")
    losses = dict(made["training"]["loss"])
    points = {point["step"]: point for point in made["training"]["held_out_during"]}
    for item in check["compared"]:
        step, what = item["what"].removeprefix("step ").split(": ")
        recorded = losses[int(step)] if what == "loss" else points[int(step)][what]
        assert item["recorded"] == round(recorded, 4), item
    assert check["passed"] == (check["same_tokenizer"] and check["largest_difference"] <= 0.02)


def test_line_ends_are_the_kind_of_token_the_draft_gets_right_most() -> None:
    """Lesson 12 says so under the agreement table; the measurements must bear it out in both languages."""
    from site_scripts.trained.committed import measurements
    from site_scripts.trained.sentences import RANKED_KIND_TOKENS

    for lang, kinds in measurements()["agreement_by_kind"].items():
        ranked = sorted((k for k, v in kinds.items() if v["tokens"] >= RANKED_KIND_TOKENS),
                        key=lambda k: -kinds[k]["share"])
        assert ranked[0] == "line end", (lang, ranked)


def test_each_training_step_is_one_short_file_that_states_its_scope() -> None:
    """The ``training`` package reads as a chapter: every file under 250 lines, opening with what it does and
    does not do, and named in the reading order of the package's docstring."""
    import ast

    import training

    package = ROOT / "training"
    for path in sorted(package.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        assert len(source.splitlines()) <= 250, path.name
        docstring = ast.get_docstring(ast.parse(source)) or ""
        assert "Non-scope" in docstring, f"{path.name} does not say what it leaves out"
        if path.name != "__init__.py":
            assert f"``{path.name}``" in training.__doc__, f"{path.name} is missing from the reading order"
