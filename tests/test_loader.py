"""The checkpoint loader against folders written by transformers' own ``save_pretrained``.

Three tiny layouts: a flat untied ``Qwen3_5ForCausalLM``, a multimodal tied
``Qwen3_5ForConditionalGeneration`` (text weights under ``model.language_model.``, a vision tower under
``model.visual.``) and an untied ``Qwen2ForCausalLM``. Norm weights are randomised so that a norm loaded
wrongly (or left at its initial value) changes the logits. Then every error the loader reports.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

transformers = pytest.importorskip("transformers")

from mini_deepinfer.models import CausalLM  # noqa: E402
from mini_deepinfer.models.cache import HybridCache  # noqa: E402
from mini_deepinfer.models.loader import (  # noqa: E402
    CheckpointError,
    CheckpointNotFoundError,
    CorruptWeightsError,
    MissingConfigError,
    MissingTensorError,
    NoWeightsError,
    ShapeMismatchError,
    UnexpectedTensorError,
    UnsupportedArchitectureError,
    load_checkpoint,
    parameter_name,
    read_generation_config,
)
from mini_deepinfer.runtime.staging import batch_from_sequences  # noqa: E402

PROMPT = [3, 17, 256, 11, 42, 500, 7, 99, 1, 64, 300, 5]
ROPE = {
    "rope_type": "default",
    "rope_theta": 1e7,
    "partial_rotary_factor": 0.25,
    "mrope_section": [2, 1, 1],
    "mrope_interleaved": True,
}


def qwen3_5_text_config(tied: bool) -> transformers.Qwen3_5TextConfig:
    return transformers.Qwen3_5TextConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        full_attention_interval=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        tie_word_embeddings=tied,
        rope_parameters=dict(ROPE),
    )


def randomise_norms(model: torch.nn.Module, seed: int) -> None:
    """Move every norm weight and bias away from its initial value."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(torch.randn(param.shape, generator=generator) * 0.3)


def save_hf(model: torch.nn.Module, folder: Path, **kwargs) -> Path:
    model.save_pretrained(folder, **kwargs)
    return folder


def hf_qwen3_5_causal() -> torch.nn.Module:
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForCausalLM(qwen3_5_text_config(tied=False)).eval()
    randomise_norms(model, seed=1)
    return model


def hf_qwen3_5_multimodal() -> torch.nn.Module:
    torch.manual_seed(0)
    vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64}
    config = transformers.Qwen3_5Config(
        text_config=qwen3_5_text_config(tied=True).to_dict(), vision_config=vision, tie_word_embeddings=True
    )
    model = transformers.Qwen3_5ForConditionalGeneration(config).eval()
    randomise_norms(model, seed=2)
    return model


def hf_qwen2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        rope_theta=10000.0,
    )
    model = transformers.Qwen2ForCausalLM(config).eval()
    randomise_norms(model, seed=3)
    return model


HF_BUILDERS = {
    "qwen3_5_causal": hf_qwen3_5_causal,
    "qwen3_5_multimodal": hf_qwen3_5_multimodal,
    "qwen2": hf_qwen2,
}


@pytest.fixture(scope="module", params=sorted(HF_BUILDERS))
def saved(request, tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    """An HF model and the folder its ``save_pretrained`` wrote."""
    model = HF_BUILDERS[request.param]()
    return model, save_hf(model, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def qwen2_folder(tmp_path_factory) -> Path:
    """A saved tiny Qwen2 folder that error tests copy and break."""
    return save_hf(hf_qwen2(), tmp_path_factory.mktemp("qwen2_errors"))


def our_logits(model: CausalLM, ids: list[int]) -> torch.Tensor:
    """Logits of every position of one sequence, prefilled in one round."""
    cache = HybridCache(model.config, len(ids), 1, torch.float32, "cpu")
    batch = batch_from_sequences([ids], [0], [list(range(len(ids)))], [0], all_logits=True)
    return model(batch, cache)


def hf_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]


def broken_copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "checkpoint"
    shutil.copytree(source, target)
    return target


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_loaded_model_logits_match_transformers(saved) -> None:
    hf_model, folder = saved
    loaded = load_checkpoint(folder, dtype=torch.float32)
    ours, reference = our_logits(loaded.model, PROMPT), hf_logits(hf_model, PROMPT)
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=0)
    assert loaded.num_parameters == loaded.config.num_parameters()
    assert loaded.path == folder and loaded.dtype == torch.float32


@pytest.mark.parametrize("saved", ["qwen3_5_multimodal"], indirect=True)
def test_multimodal_checkpoint_keeps_text_weights_under_language_model_and_ignores_the_rest(saved) -> None:
    _, folder = saved
    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        names = list(handle.keys())
    assert any(n.startswith("model.language_model.layers.0.") for n in names)
    assert any(n.startswith("model.visual.") for n in names)
    loaded = load_checkpoint(folder)
    assert loaded.model.lm_head.weight is loaded.model.model.embed_tokens.weight


def test_parameter_name_strips_language_model_and_skips_vision_and_mtp() -> None:
    assert parameter_name("model.language_model.norm.weight") == "model.norm.weight"
    assert parameter_name("model.layers.3.mlp.up_proj.weight") == "model.layers.3.mlp.up_proj.weight"
    assert parameter_name("lm_head.weight") == "lm_head.weight"
    assert parameter_name("model.visual.blocks.0.attn.qkv.weight") is None
    assert parameter_name("mtp.layers.0.self_attn.q_proj.weight") is None


def test_sharded_checkpoint_loads_the_same_weights_as_one_file(tmp_path) -> None:
    model = hf_qwen3_5_causal()
    single = load_checkpoint(save_hf(model, tmp_path / "single"))
    sharded_folder = save_hf(model, tmp_path / "sharded", max_shard_size="100KB")
    assert (sharded_folder / "model.safetensors.index.json").is_file()
    assert len(list(sharded_folder.glob("*.safetensors"))) > 1
    sharded = load_checkpoint(sharded_folder)
    for (name, a), (_, b) in zip(single.model.state_dict().items(), sharded.model.state_dict().items()):
        assert torch.equal(a, b), name


def test_shards_without_an_index_are_all_read(tmp_path) -> None:
    folder = save_hf(hf_qwen2(), tmp_path / "sharded", max_shard_size="100KB")
    (folder / "model.safetensors.index.json").unlink()
    reference = load_checkpoint(save_hf(hf_qwen2(), tmp_path / "single"))
    loaded = load_checkpoint(folder)
    for (name, a), (_, b) in zip(reference.model.state_dict().items(), loaded.model.state_dict().items()):
        assert torch.equal(a, b), name


def test_bfloat16_load_converts_every_parameter(qwen2_folder) -> None:
    loaded = load_checkpoint(qwen2_folder, dtype=torch.bfloat16)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}


def test_missing_folder_is_reported(tmp_path) -> None:
    with pytest.raises(CheckpointNotFoundError, match="checkpoint folder not found: .*nowhere"):
        load_checkpoint(tmp_path / "nowhere")


def test_empty_folder_reports_missing_config(tmp_path) -> None:
    with pytest.raises(MissingConfigError, match="no config.json in checkpoint folder"):
        load_checkpoint(tmp_path)


def test_folder_without_safetensors_is_reported(qwen2_folder, tmp_path) -> None:
    folder = broken_copy(qwen2_folder, tmp_path)
    (folder / "model.safetensors").unlink()
    with pytest.raises(NoWeightsError, match=r"no \*\.safetensors weight files"):
        load_checkpoint(folder)


def test_index_naming_a_missing_shard_is_reported(tmp_path) -> None:
    folder = save_hf(hf_qwen2(), tmp_path / "sharded", max_shard_size="100KB")
    shard = sorted(folder.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(NoWeightsError, match=f"lists {shard.name}, which is missing"):
        load_checkpoint(folder)


@pytest.mark.parametrize("keep_bytes", [0, 7, 2000, -100])
def test_truncated_weight_file_is_reported_with_its_name(qwen2_folder, tmp_path, keep_bytes) -> None:
    folder = broken_copy(qwen2_folder, tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:keep_bytes] if keep_bytes >= 0 else data[:keep_bytes])
    with pytest.raises(CorruptWeightsError, match="corrupt or truncated weight file .*model.safetensors"):
        load_checkpoint(folder)


def test_shape_mismatch_names_the_tensor_and_both_shapes(qwen2_folder, tmp_path) -> None:
    folder = broken_copy(qwen2_folder, tmp_path)
    edit_json(folder / "config.json", intermediate_size=256)
    expected = (
        r"weight shape mismatch: model\.layers\.0\.mlp\.gate_proj\.weight is \[128, 64\] in the checkpoint, "
        r"\[256, 64\] from config\.json"
    )
    with pytest.raises(ShapeMismatchError, match=expected):
        load_checkpoint(folder)


def test_unknown_architecture_is_reported(qwen2_folder, tmp_path) -> None:
    folder = broken_copy(qwen2_folder, tmp_path)
    edit_json(folder / "config.json", architectures=["LlamaForCausalLM"], model_type="llama")
    with pytest.raises(UnsupportedArchitectureError, match="unsupported architecture LlamaForCausalLM"):
        load_checkpoint(folder)


def test_missing_tensor_is_named(qwen2_folder, tmp_path) -> None:
    folder = broken_copy(qwen2_folder, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.post_attention_layernorm.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(MissingTensorError, match=r"missing tensor model\.layers\.1\.post_attention_"):
        load_checkpoint(folder)


def test_untied_config_without_a_head_is_reported(qwen2_folder, tmp_path) -> None:
    folder = broken_copy(qwen2_folder, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(MissingTensorError, match="lm_head.weight .*tie_word_embeddings false"):
        load_checkpoint(folder)


def test_unexpected_tensor_is_named(qwen2_folder, tmp_path) -> None:
    folder = broken_copy(qwen2_folder, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.0.self_attn.o_proj.bias"] = torch.zeros(64)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UnexpectedTensorError, match=r"unexpected tensor model\.layers\.0\.self_attn\.o_proj"):
        load_checkpoint(folder)


def test_every_checkpoint_error_is_a_one_line_value_error(tmp_path) -> None:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "nowhere")
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_generation_config_eos_becomes_a_list(tmp_path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 7, "temperature": 0.6}))
    assert read_generation_config(tmp_path) == {"eos_token_id": [7], "temperature": 0.6}
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [248046, 248044]}))
    assert read_generation_config(tmp_path)["eos_token_id"] == [248046, 248044]


def test_generation_config_falls_back_to_the_text_config_eos(tmp_path) -> None:
    config = {"eos_token_id": 1, "text_config": {"eos_token_id": 248044}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert read_generation_config(tmp_path) == {"eos_token_id": [248044]}
    (tmp_path / "empty").mkdir()
    assert read_generation_config(tmp_path / "empty")["eos_token_id"] == []


def sharded_qwen2(tmp_path: Path) -> Path:
    return save_hf(hf_qwen2(), tmp_path / "sharded", max_shard_size="100KB")


@pytest.mark.parametrize("how", ["absolute path", "dot-dot", "symbolic link out"])
def test_a_shard_the_index_names_outside_the_folder_is_refused_naming_the_entry(tmp_path, how) -> None:
    folder = sharded_qwen2(tmp_path)
    other = sharded_qwen2(tmp_path / "other")  # another checkpoint's shard: loadable, but not this one's
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    tensor, shard = sorted(index["weight_map"].items())[0]
    if how == "symbolic link out":
        (folder / shard).unlink()
        (folder / shard).symlink_to(other / shard)
    else:
        outside = str(other / shard) if how == "absolute path" else f"../other/sharded/{shard}"
        index["weight_map"][tensor] = outside
        index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"outside the checkpoint folder .*; refused") as info:
        load_checkpoint(folder)
    assert "\n" not in str(info.value)
    if how != "symbolic link out":
        assert f"entry '{tensor}'" in str(info.value)


def test_the_hugging_face_cache_links_to_its_own_blobs_are_followed(tmp_path) -> None:
    saved_folder = save_hf(hf_qwen2(), tmp_path / "plain")
    snapshot = tmp_path / "models--x" / "snapshots" / "abc"
    blobs = tmp_path / "models--x" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for file in saved_folder.iterdir():
        shutil.copy(file, blobs / file.name)
        (snapshot / file.name).symlink_to(Path("../../blobs") / file.name)
    assert load_checkpoint(snapshot).num_parameters == load_checkpoint(saved_folder).num_parameters


def test_a_tensor_two_shards_hold_is_refused_naming_both_files(tmp_path) -> None:
    folder = sharded_qwen2(tmp_path)
    (folder / "model.safetensors.index.json").unlink()
    first, second = sorted(folder.glob("*.safetensors"))[:2]
    tensors = load_file(second)
    tensors.update({name: t.clone() for name, t in load_file(first).items()})
    save_file(tensors, second, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=rf"stored twice: .* in {first.name} and .* in {second.name}"):
        load_checkpoint(folder)


@pytest.mark.parametrize("name", ["config.json", "generation_config.json"])
def test_json_nested_too_deep_is_one_line(qwen2_folder, tmp_path, name) -> None:
    folder = broken_copy(qwen2_folder, tmp_path)
    (folder / name).write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    reader = read_generation_config if name == "generation_config.json" else load_checkpoint
    with pytest.raises(CheckpointError, match="nested deeper than Python's parser goes"):
        reader(folder)


def test_loading_or_building_a_model_does_not_import_sympy(tiny_checkpoint) -> None:
    """torch's Python reference kernels for meta tensors (``empty_like``, ``normal_``) import sympy and
    torch's symbolic shapes on first use, about 0.8 s of every command; building a model must not reach
    them."""
    import subprocess
    import sys

    script = ("import sys, torch\n"
              "from mini_deepinfer.models import build_model\n"
              "from mini_deepinfer.models.loader import load_checkpoint\n"
              f"model = load_checkpoint({str(tiny_checkpoint)!r}, torch.float32, 'cpu')\n"
              "build_model(model.config, torch.float32, 'cpu', seed=0)\n"
              "build_model(model.config, torch.float32, 'meta')\n"
              "slow = ('sympy', 'torch.fx.experimental.symbolic_shapes')\n"
              "print(sorted(m for m in sys.modules if m.startswith(slow)))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout
