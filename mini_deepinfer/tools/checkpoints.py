"""Checkpoint writers: a random checkpoint in the released layout, and a perturbed copy to serve as a draft.

Scope: the presets' ``config.json``, ``tokenizer_config.json`` and ``generation_config.json`` (Qwen3.5's
multimodal file with the text model under ``text_config``, Qwen2's flat file); random weights under the
released tensor names (``model.language_model.`` for Qwen3.5, ``model.`` for Qwen2), in one
``model.safetensors`` or in shards with ``model.safetensors.index.json``; the tokenizer
(``tokenizer_files.py``). A folder is written under a hidden name and renamed when complete
(``files.staged_folder``), so an interrupted run leaves no half-written checkpoint. :func:`perturbed_copy` and
:func:`write_perturbed_checkpoint` make a draft from a target by adding noise to its matrices, in memory or on
disk.

Non-scope: the weights of the vision tower and of the multi-token-prediction head of the released Qwen3.5
files (the engine ignores both, so they are not written; ``vision_config`` is written so that transformers can
build the multimodal class), trained weights of any kind, and chat templates for tool use. Random weights
produce random text: the checkpoints exist to exercise the engine, the loader and the text layer with the real
shapes and the real vocabulary.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from mini_deepinfer.models import build_model
from mini_deepinfer.models.config import ModelConfig, config_from_hf_dict
from mini_deepinfer.models.layers import CausalLM
from mini_deepinfer.models.loader import (
    RANDOM_WEIGHTS_KEY,
    SINGLE_WEIGHTS_FILE,
    TEXT_PREFIX,
    WEIGHTS_INDEX_FILE,
    checkpoint_folder,
    expected_tensors,
)
from mini_deepinfer.models.presets import QWEN2_SHAPES, QWEN3_5_SHAPES, QWEN3_5_VOCAB
from mini_deepinfer.runtime.device import dtype_name
from mini_deepinfer.tools.checkpoint_options import (
    CHECKPOINT_DTYPE_NAMES,
    CHECKPOINT_PRESETS,
    DEFAULT_MAX_SHARD_SIZE,
)
from mini_deepinfer.tools.files import check_free_space, disk_errors, staged_folder
from mini_deepinfer.tools.tokenizer_files import (
    QWEN3_5_CHAT_TEMPLATE,
    R1_DISTILL_CHAT_TEMPLATE,
    TOKENIZER_RECIPES,
    added_tokens_decoder,
    tokenizer_file,
)

CHECKPOINT_DTYPES = {name: getattr(torch, name) for name in CHECKPOINT_DTYPE_NAMES}

# ---------------------------------------------------------------------------------------------------------
# Presets: config.json, tokenizer_config.json and generation_config.json of each model.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    """Everything a preset writes besides the weights and the tokenizer."""

    name: str
    config: dict[str, Any]
    tokenizer_family: str
    tokenizer_config: dict[str, Any]
    generation_config: dict[str, Any]


def qwen3_5_text_config(preset_name: str, mrope_section: list[int]) -> dict[str, Any]:
    """The released-style ``text_config`` of a Qwen3.5 preset (its shape from ``models.presets``).

    ``mrope_section`` says how the rotary frequencies (head dim / 8 of them) split over the three multimodal
    position rows; for text all rows hold the same position, so only the sum matters.
    """
    shape = QWEN3_5_SHAPES[preset_name]
    layers = shape["num_hidden_layers"]
    return {
        "model_type": "qwen3_5_text",
        "vocab_size": QWEN3_5_VOCAB,
        "hidden_size": shape["hidden_size"],
        "intermediate_size": shape["intermediate_size"],
        "num_hidden_layers": layers,
        "num_attention_heads": shape["num_attention_heads"],
        "num_key_value_heads": shape["num_key_value_heads"],
        "head_dim": shape["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "full_attention_interval": 4,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": shape["linear_key_head_dim"],
        "linear_value_head_dim": shape["linear_value_head_dim"],
        "linear_num_key_heads": shape["linear_num_key_heads"],
        "linear_num_value_heads": shape["linear_num_value_heads"],
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
            "mrope_section": mrope_section,
            "mrope_interleaved": True,
        },
        "eos_token_id": 248044,
        "initializer_range": 0.02,
        "use_cache": True,
    }


def qwen3_5_vision_config(
    depth: int, hidden: int, intermediate: int, heads: int, out_hidden: int
) -> dict[str, Any]:
    """A Qwen3.5 ``vision_config`` (no vision weights are written; transformers needs the shapes)."""
    return {
        "model_type": "qwen3_5_vision",
        "depth": depth,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_heads": heads,
        "out_hidden_size": out_hidden,
        "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 2304,
        "initializer_range": 0.02,
    }


def qwen3_5_preset(name: str, text_config: dict[str, Any], vision_config: dict[str, Any]) -> Preset:
    """A Qwen3.5 preset: the multimodal config layout of the released 0.8B and 2B checkpoints."""
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text_config,
        "vision_config": vision_config,
        "tie_word_embeddings": True,
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
    }
    tokenizer_config = {
        "tokenizer_class": "Qwen3_5Tokenizer",
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "model_max_length": 262144,
        "chat_template": QWEN3_5_CHAT_TEMPLATE,
    }
    generation_config = {"bos_token_id": 248044, "eos_token_id": [248046, 248044], "pad_token_id": 248044}
    return Preset(name, config, "qwen3.5", tokenizer_config, generation_config)


def qwen2_r1_distill_preset() -> Preset:
    """DeepSeek-R1-Distill-Qwen-1.5B: a flat Qwen2 config with an untied head."""
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        **QWEN2_SHAPES["qwen2-1.5b"],
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 21,
        "tie_word_embeddings": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151643,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    tokenizer_config = {
        "tokenizer_class": "LlamaTokenizerFast",
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
        "pad_token": "<｜end▁of▁sentence｜>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 16384,
        "chat_template": R1_DISTILL_CHAT_TEMPLATE,
    }
    generation_config = {
        "bos_token_id": 151646,
        "eos_token_id": 151643,
        "do_sample": True,
        "temperature": 0.6,
        "top_p": 0.95,
    }
    return Preset("qwen2-1.5b", config, "r1-distill-qwen", tokenizer_config, generation_config)


def preset(name: str) -> Preset:
    """The checkpoint preset called ``name`` (one of ``models.presets.PRESET_NAMES`` but ``small``)."""
    if name == "tiny":
        # the real vocabulary, so that the real tokenizer fits
        text = qwen3_5_text_config(name, [2, 1, 1])
        return qwen3_5_preset(name, text, qwen3_5_vision_config(1, 32, 64, 2, 64))
    if name == "qwen3.5-0.8b":
        text = qwen3_5_text_config(name, [11, 11, 10])
        return qwen3_5_preset(name, text, qwen3_5_vision_config(12, 768, 3072, 12, 1024))
    if name == "qwen3.5-2b":
        text = qwen3_5_text_config(name, [11, 11, 10])
        return qwen3_5_preset(name, text, qwen3_5_vision_config(24, 1024, 4096, 16, 2048))
    if name == "qwen2-1.5b":
        return qwen2_r1_distill_preset()
    raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(CHECKPOINT_PRESETS)}")


# ---------------------------------------------------------------------------------------------------------
# Random weights.
# ---------------------------------------------------------------------------------------------------------


def tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Our parameter names and shapes for ``config``, from the model built on the meta device (no memory)."""
    meta_model = build_model(config, torch.float32, torch.device("meta"))
    return {name: tuple(t.shape) for name, t in expected_tensors(meta_model).items()}


def checkpoint_name(name: str, config: ModelConfig) -> str:
    """The released file's name for one of our parameters (Qwen3.5 nests the text model)."""
    if config.architecture == "Qwen3_5ForConditionalGeneration" and name.startswith("model."):
        return TEXT_PREFIX + name[len("model.") :]
    return name


def random_tensor(
    name: str, shape: tuple[int, ...], config: ModelConfig, gen: torch.Generator
) -> torch.Tensor:
    """A float32 tensor with values of the size a trained model has for this kind of parameter.

    Projections and embeddings: normal with std ``initializer_range``. Norm weights: small random offsets
    around the neutral value (0 for Qwen3.5's ``x_hat * (1 + w)`` norms, 1 for plain ``w * x_hat`` norms,
    which are Qwen2's and Gated DeltaNet's output norm). ``A_log``: log of a decay rate in [1, 16].
    ``dt_bias``: inverse softplus of a time step between 0.001 and 0.1. Convolution taps: uniform with the
    usual ``1/sqrt(kernel)`` bound.
    """
    if name.endswith("A_log"):
        return torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log()
    if name.endswith("dt_bias"):
        dt = torch.empty(shape).uniform_(math.log(1e-3), math.log(1e-1), generator=gen).exp()
        return dt + torch.log(-torch.expm1(-dt))
    if name.endswith("conv1d.weight"):
        bound = 1.0 / math.sqrt(shape[-1])
        return torch.empty(shape).uniform_(-bound, bound, generator=gen)
    if name.endswith("norm.weight"):
        plain = name.endswith("linear_attn.norm.weight") or not config.architecture.startswith("Qwen3_5")
        offsets = torch.empty(shape).normal_(0.0, 0.1, generator=gen)
        return 1.0 + offsets if plain else offsets
    return torch.empty(shape).normal_(0.0, config.initializer_range, generator=gen)


def plan_shards(shapes: dict[str, tuple[int, ...]], item_size: int, max_shard_size: int) -> list[list[str]]:
    """Group tensor names, in order, into shards of at most ``max_shard_size`` bytes.

    A tensor larger than the limit gets a shard of its own.
    """
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = math.prod(shape) * item_size
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def shard_file_names(count: int) -> list[str]:
    """``model.safetensors`` for one shard, ``model-00001-of-0000N.safetensors`` for several."""
    if count == 1:
        return [SINGLE_WEIGHTS_FILE]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def random_shards(
    config: ModelConfig, dtype: torch.dtype, seed: int, max_shard_size: int
) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """Yield ``(file name, tensors)`` one shard at a time, so memory holds one shard only.

    Tensors are drawn in the same order whatever the shard size, so the values depend on the seed only.
    A progress bar (one step per tensor) shows on stderr when stderr is a terminal.
    """
    shapes = tensor_shapes(config)
    shards = plan_shards(shapes, torch.empty(0, dtype=dtype).element_size(), max_shard_size)
    gen = torch.Generator().manual_seed(seed)
    with tqdm(total=len(shapes), desc="random weights", unit="tensor", disable=not sys.stderr.isatty(),
              leave=False) as bar:
        for file_name, names in zip(shard_file_names(len(shards)), shards):
            tensors = {}
            for n in names:
                tensors[checkpoint_name(n, config)] = random_tensor(n, shapes[n], config, gen).to(dtype)
                bar.update()
            yield file_name, tensors


def save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """``safetensors.torch.save_file``, with a full disk as one line (``files.NoSpaceError``)."""
    with disk_errors(path, (SafetensorError,)):
        save_file(tensors, str(path), metadata={"format": "pt"})


def write_weights(
    folder: Path, config: ModelConfig, dtype: torch.dtype, seed: int, max_shard_size: int
) -> int:
    """Write the weight files (and the index when sharded); return the number of bytes of tensor data."""
    weight_map: dict[str, str] = {}
    total = 0
    for file_name, tensors in random_shards(config, dtype, seed, max_shard_size):
        save_tensors(tensors, folder / file_name)
        weight_map.update({name: file_name for name in tensors})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
    if len(set(weight_map.values())) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        write_json(folder / WEIGHTS_INDEX_FILE, index)
    return total


# ---------------------------------------------------------------------------------------------------------
# Writing the folder.
# ---------------------------------------------------------------------------------------------------------


def checkpoint_size(config: ModelConfig, dtype: torch.dtype, chosen: Preset) -> int:
    """Bytes a random checkpoint takes, known before it is written: the weights, the tokenizer file, and a
    megabyte for the headers and the small JSON files."""
    weights = config.num_parameters() * torch.empty(0, dtype=dtype).element_size()
    tokenizer = len(tokenizer_file(chosen.tokenizer_family).text.encode("utf-8"))
    return weights + tokenizer + 2**20


@dataclass(frozen=True)
class CheckpointSummary:
    """What was written."""

    path: Path
    preset: str
    architecture: str
    num_parameters: int
    weight_bytes: int
    weight_files: int
    seconds: float

    def describe(self) -> str:
        return (
            f"wrote {self.preset} ({self.architecture}, random weights): "
            f"{self.num_parameters / 1e6:.1f}M parameters, {self.weight_bytes / 1e6:.1f} MB in "
            f"{self.weight_files} weight file(s), {self.seconds:.1f} s -> {self.path}"
        )


def write_json(path: Path, data: dict[str, Any]) -> None:
    with disk_errors(path):
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_text_files(folder: Path, chosen: Preset) -> None:
    """``tokenizer.json``, ``tokenizer_config.json`` and ``generation_config.json``."""
    built = tokenizer_file(chosen.tokenizer_family)
    with disk_errors(folder / "tokenizer.json"):
        (folder / "tokenizer.json").write_text(built.text, encoding="utf-8")
    recipe = TOKENIZER_RECIPES[chosen.tokenizer_family]
    decoder = added_tokens_decoder(built, recipe)
    write_json(folder / "tokenizer_config.json", {**chosen.tokenizer_config, "added_tokens_decoder": decoder})
    write_json(folder / "generation_config.json", chosen.generation_config)


def write_random_checkpoint(
    output: str | Path,
    preset_name: str = "tiny",
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
    max_shard_size: int = DEFAULT_MAX_SHARD_SIZE,
    force: bool = False,
) -> CheckpointSummary:
    """Write a random checkpoint of ``preset_name`` to the folder ``output``.

    Everything is written into a hidden folder beside ``output`` and renamed at the end
    (``tools.files.staged_folder``); on any error or interruption ``output`` is left as it was.

    Raises:
        ValueError: unknown preset, unsupported dtype or a shard size below one byte.
        FileExistsError: ``output`` is a file, or a non-empty folder and ``force`` is false.
    """
    started = time.perf_counter()
    chosen = preset(preset_name)
    if dtype not in CHECKPOINT_DTYPES.values():
        raise ValueError(f"unsupported dtype {dtype}; choose float32 or bfloat16")
    if max_shard_size < 1:
        raise ValueError(f"max shard size must be positive, got {max_shard_size}")
    config_dict = {**json.loads(json.dumps(chosen.config)), "dtype": dtype_name(dtype),
                   RANDOM_WEIGHTS_KEY: {"preset": preset_name, "seed": seed}}
    if "text_config" in config_dict:
        config_dict["text_config"]["dtype"] = dtype_name(dtype)
    config = config_from_hf_dict(config_dict)
    check_free_space(output, checkpoint_size(config, dtype, chosen))
    with staged_folder(output, force) as staging:
        write_json(staging / "config.json", config_dict)
        weight_bytes = write_weights(staging, config, dtype, seed, max_shard_size)
        write_text_files(staging, chosen)
        files = len(list(staging.glob("*.safetensors")))
    output = Path(output).absolute()
    return CheckpointSummary(
        output,
        preset_name,
        config.architecture,
        config.num_parameters(),
        weight_bytes,
        files,
        time.perf_counter() - started,
    )


# ---------------------------------------------------------------------------------------------------------
# A draft from a target: the same model with noise on its matrices.
# ---------------------------------------------------------------------------------------------------------


def _noise_like(t: torch.Tensor, noise: float, generator: torch.Generator) -> torch.Tensor:
    """Gaussian noise of ``noise`` x the tensor's own standard deviation, drawn on the CPU (so a seed gives
    the same draft on every device) and moved to the tensor's device and dtype."""
    scale = float(t.float().std()) * noise
    return (torch.randn(t.shape, generator=generator) * scale).to(device=t.device, dtype=t.dtype)


def _check_finite(t: torch.Tensor, noise: float, name: str) -> torch.Tensor:
    """``t``, refused when the noise made a value non-finite in its dtype (a huge ``noise`` overflows bfloat16
    and float32): before the tensor is used or written."""
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"--noise {noise:g} makes {name} non-finite in {dtype_name(t.dtype)}; use a smaller "
                         "--noise")
    return t


# --8<-- [start:perturbed_copy]
def perturbed_copy(model: CausalLM, noise: float, seed: int) -> CausalLM:
    """A copy of ``model`` whose matrices get Gaussian noise of ``noise`` x their own standard deviation.

    Norm weights, decay rates and other vectors stay as they are. ``noise=0`` is an exact copy.
    """
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in draft.named_parameters():
            if param.dim() >= 2 and noise:
                _check_finite(param.add_(_noise_like(param, noise, generator)), noise, name)
    return draft
# --8<-- [end:perturbed_copy]


def _note_perturbation(path: Path, noise: float, seed: int) -> None:
    """Say in the copy's ``config.json`` that its weights are the source's plus noise (when they were
    ours)."""
    config = json.loads(path.read_text(encoding="utf-8"))
    made = config.get(RANDOM_WEIGHTS_KEY)
    if isinstance(made, dict):
        config[RANDOM_WEIGHTS_KEY] = {**made, "perturbed": {"noise": noise, "seed": seed}}
        write_json(path, config)


# --8<-- [start:write_draft]
def write_perturbed_checkpoint(source: Path, output: Path, noise: float, seed: int,
                               force: bool = False) -> int:
    """Copy a checkpoint folder and add noise to every weight matrix; returns the number of tensors changed.

    The copy keeps the tokenizer and config, so it can serve as a draft for the source checkpoint.
    ``force`` replaces a non-empty ``output`` folder.
    """
    source = checkpoint_folder(source, ValueError)
    if not (source / "config.json").is_file():
        raise ValueError(f"{source} is not a checkpoint folder (no config.json)")
    check_free_space(output, sum(f.stat().st_size for f in source.rglob("*") if f.is_file()))
    generator = torch.Generator().manual_seed(seed)
    changed = 0
    with staged_folder(output, force) as staging:
        _copy_all_but_weights(source, staging)
        _note_perturbation(staging / "config.json", noise, seed)
        for path in sorted(source.glob("*.safetensors")):
            tensors = load_file(str(path))
            for name in sorted(tensors):
                t = tensors[name]
                if t.dim() >= 2 and t.is_floating_point():
                    noisy = (t.float() + _noise_like(t.float(), noise, generator)).to(t.dtype)
                    tensors[name] = _check_finite(noisy, noise, name)
                    changed += 1
            save_tensors(tensors, staging / path.name)
    return changed
# --8<-- [end:write_draft]


def _copy_all_but_weights(source: Path, staging: Path) -> None:
    """Copy every file and folder of ``source`` but its ``*.safetensors`` (written perturbed afterwards), one
    at a time, so that a full disk is one line naming the file (``shutil.copytree`` gathers every failure
    into one long ``shutil.Error``)."""
    for item in sorted(source.iterdir()):
        if item.suffix == ".safetensors" and item.is_file():
            continue
        with disk_errors(staging / item.name):
            if item.is_dir():
                shutil.copytree(item, staging / item.name)
            else:
                shutil.copy2(item, staging / item.name)
# --8<-- [end:write_draft]
