"""Load a local Hugging Face checkpoint folder into our model.

Scope: reading ``config.json``; finding the weights (one ``model.safetensors``, shards listed by
``model.safetensors.index.json``, or several ``*.safetensors`` files without an index); mapping checkpoint
tensor names to our parameter names (the released Qwen3.5 files keep the text model under
``model.language_model.`` beside a vision tower ``model.visual.`` and a multi-token-prediction head
``mtp.``, both ignored); checking that every parameter is present with the shape ``config.json`` implies
and a floating-point dtype, before any weight is read; and copying tensors one at a time into the model on the
target device and dtype.
Also ``read_generation_config`` for the stop ids.

Non-scope: downloading anything (a folder must already be on disk), quantised or ``.bin`` (pickle)
weights, the vision tower and the MTP head, and tokenizers (see ``mini_deepinfer.runtime.text``).

Every error is a ``CheckpointError`` (a ``ValueError``) with a one-line message that names the folder,
file or tensor at fault.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from tqdm import tqdm

from mini_deepinfer.models import build_model
from mini_deepinfer.models.config import ModelConfig, UnknownArchitectureError, config_from_hf_dict
from mini_deepinfer.models.layers import CausalLM

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
SINGLE_WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"

TEXT_PREFIX = "model.language_model."
IGNORED_PREFIXES = ("model.visual.", "mtp.")
TIED_HEAD = "lm_head.weight"


class CheckpointError(ValueError):
    """A checkpoint folder cannot be loaded; the message names what is wrong."""


class CheckpointNotFoundError(CheckpointError):
    """The checkpoint folder does not exist or is not a folder."""


class MissingConfigError(CheckpointError):
    """The folder has no ``config.json``."""


class InvalidConfigError(CheckpointError):
    """``config.json`` is not valid JSON or holds values the engine cannot run."""


class UnsupportedArchitectureError(CheckpointError):
    """``config.json`` names an architecture other than Qwen3.5 or Qwen2."""


class NoWeightsError(CheckpointError):
    """The folder has no safetensors files, or the index lists a file that is absent."""


class UnsafeWeightsPathError(CheckpointError):
    """A weight file would be read from outside the checkpoint folder (an absolute path, ``..``, a link)."""


class DuplicateTensorError(CheckpointError):
    """Two weight files (or two names in one file) hold the same parameter."""


class CorruptWeightsError(CheckpointError):
    """A safetensors file is truncated or not a safetensors file."""


class MissingTensorError(CheckpointError):
    """A parameter of the model is in none of the weight files."""


class UnexpectedTensorError(CheckpointError):
    """A weight file holds a tensor the model has no parameter for."""


class ShapeMismatchError(CheckpointError):
    """A tensor's shape differs from the shape ``config.json`` implies."""


class DtypeMismatchError(CheckpointError):
    """A tensor is stored in a dtype the loader does not read: not floating point (an integer or boolean
    weight), or a floating-point format other than ``FLOAT_STORAGE`` (float8, a quantised checkpoint)."""


FLOAT_STORAGE = ("F64", "F32", "F16", "BF16")
"""The safetensors dtypes a weight may be stored in (``copy_`` converts each to the model's dtype)."""


@dataclass
class LoadedModel:
    """A model with its weights, and where they came from."""

    model: CausalLM
    config: ModelConfig
    path: Path
    dtype: torch.dtype
    num_parameters: int
    weights: str = "read from the checkpoint; not written by mini_deepinfer.random_checkpoint"


def checkpoint_folder(path: str | Path, error: type[Exception] = CheckpointNotFoundError) -> Path:
    """Return ``path`` as a ``Path`` after checking that it is an existing folder; ``error`` otherwise, saying
    whether nothing is there or something that is not a folder (``config.json`` given for its folder)."""
    folder = Path(path)
    if folder.is_dir():
        return folder
    if folder.is_file():
        raise error(f"{folder} is a file, not a checkpoint folder; give the folder that holds config.json "
                    "and the weights")
    if folder.exists():
        raise error(f"{folder} is not a folder; a checkpoint is a folder that holds config.json and the "
                    "weights")
    raise error(f"checkpoint folder not found: {folder}")


def read_json(path: Path, error: type[Exception] = InvalidConfigError) -> dict[str, Any]:
    """Read a JSON object from ``path``; a file that is not one raises ``error`` with a one-line message."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"corrupt JSON file {path}: {exc}") from exc
    except RecursionError:
        raise error(f"corrupt JSON file {path}: nested deeper than Python's parser goes") from None
    if not isinstance(data, dict):
        raise error(f"corrupt JSON file {path}: expected an object at the top level")
    return data


def read_config_dict(folder: Path) -> dict[str, Any]:
    """The raw ``config.json`` of a checkpoint folder."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise MissingConfigError(f"no {CONFIG_FILE} in checkpoint folder {folder}")
    return read_json(path)


RANDOM_WEIGHTS_KEY = "mini_deepinfer_random_weights"
"""The ``config.json`` entry that this package's checkpoint writers add, saying how the weights were made."""


def describe_weights(config: dict[str, Any]) -> str:
    """What run records say of a checkpoint's weights: random (and how), when one of our writers made them."""
    made = config.get(RANDOM_WEIGHTS_KEY)
    if not isinstance(made, dict):
        return LoadedModel.weights
    preset, seed = made.get("preset"), made.get("seed")
    text = f"random weights from mini_deepinfer.random_checkpoint (preset {preset}, seed {seed})"
    noise = made.get("perturbed")
    if isinstance(noise, dict):
        text += f", plus noise {noise.get('noise')} x each matrix's std (seed {noise.get('seed')})"
    return text


def parse_model_config(raw: dict[str, Any], folder: Path) -> ModelConfig:
    """Parse the ``config.json`` of ``folder`` (read as ``raw``) into our configuration class."""
    try:
        return config_from_hf_dict(raw)
    except UnknownArchitectureError as exc:
        raise UnsupportedArchitectureError(f"{folder / CONFIG_FILE}: {exc}") from exc
    except (ValueError, TypeError) as exc:
        raise InvalidConfigError(f"{folder / CONFIG_FILE}: {exc}") from exc


def read_generation_config(path: str | Path) -> dict[str, Any]:
    """Read ``generation_config.json``, with ``eos_token_id`` always a list of ints.

    The file may store ``eos_token_id`` as an int or a list. When the file is absent, or has no
    ``eos_token_id``, the ids come from ``config.json`` (its ``text_config`` first); with neither, the list is
    empty.
    """
    folder = checkpoint_folder(path)
    gen_path = folder / GENERATION_CONFIG_FILE
    settings = read_json(gen_path) if gen_path.is_file() else {}
    eos = settings.get("eos_token_id")
    if eos is None and (folder / CONFIG_FILE).is_file():
        raw = read_config_dict(folder)
        text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
        eos = text.get("eos_token_id", raw.get("eos_token_id"))
    ids = [] if eos is None else list(eos) if isinstance(eos, list) else [eos]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InvalidConfigError(f"eos_token_id must be an int or a list of ints in {folder}, got {eos!r}")
    return {**settings, "eos_token_id": ids}


def find_weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint, each checked to lie inside it (:func:`check_inside`).

    Order of preference: the files named by ``model.safetensors.index.json``; ``model.safetensors``;
    every ``*.safetensors`` in the folder (sharded without an index).
    """
    index_path = folder / WEIGHTS_INDEX_FILE
    if index_path.is_file():
        return indexed_files(folder, index_path)
    if (folder / SINGLE_WEIGHTS_FILE).is_file():
        return [check_inside(folder, SINGLE_WEIGHTS_FILE, SINGLE_WEIGHTS_FILE)]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise NoWeightsError(f"no *.safetensors weight files in checkpoint folder {folder}")
    return [check_inside(folder, file.name, file.name) for file in files]


def indexed_files(folder: Path, index_path: Path) -> list[Path]:
    """The shard files ``weight_map`` names: each a string naming a file inside ``folder``."""
    weight_map = read_json(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise InvalidConfigError(f"{index_path} has no weight_map")
    files: dict[str, Path] = {}
    for tensor, name in weight_map.items():
        if not isinstance(name, str) or not name:
            raise InvalidConfigError(f"{index_path.name}: weight_map entry {tensor!r} is {name!r}, "
                                     "not a file name")
        if name not in files:
            files[name] = check_inside(folder, name, f"{index_path.name} entry {tensor!r} -> {name!r}")
    for file in files.values():
        if not file.is_file():
            raise NoWeightsError(f"{index_path.name} lists {file.name}, which is missing from {folder}")
    return [files[name] for name in sorted(files)]


# --8<-- [start:check_inside]
def check_inside(folder: Path, name: str, what: str) -> Path:
    """``folder / name``, refused unless it stays inside ``folder`` once every symbolic link is followed.

    An index is data from the checkpoint: an absolute path or ``..`` in it could make the loader read any
    file, a link in the folder could too. The one link allowed out is the Hugging Face cache's own
    (``snapshots/REV/file`` -> ``blobs/HASH`` of the same model).
    """
    home = Path(os.path.realpath(folder))
    target = Path(os.path.realpath(folder / name))
    allowed = [home] + ([home.parent.parent / "blobs"] if home.parent.name == "snapshots" else [])
    if Path(name).is_absolute() or not any(target.is_relative_to(place) for place in allowed):
        raise UnsafeWeightsPathError(f"{what} resolves to {target}, outside the checkpoint folder {folder}; "
                                     "refused")
    return folder / name
# --8<-- [end:check_inside]


# --8<-- [start:parameter_name]
def parameter_name(checkpoint_name: str) -> str | None:
    """Our parameter name for a checkpoint tensor name, or None for a tensor we do not load.

    ``model.language_model.X`` becomes ``model.X``; the vision tower and the MTP head are skipped.
    """
    if checkpoint_name.startswith(IGNORED_PREFIXES):
        return None
    if checkpoint_name.startswith(TEXT_PREFIX):
        return "model." + checkpoint_name[len(TEXT_PREFIX) :]
    return checkpoint_name
# --8<-- [end:parameter_name]


@dataclass(frozen=True)
class TensorSource:
    """Where one of our parameters is stored: the file, the name there, and the stored shape."""

    file: Path
    name: str
    shape: tuple[int, ...]


def index_tensors(files: Iterable[Path]) -> dict[str, TensorSource]:
    """Map each of our parameter names to its stored tensor, reading only the safetensors headers."""
    sources: dict[str, TensorSource] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():
                    ours = parameter_name(name)
                    if ours is not None:
                        stored = handle.get_slice(name)
                        check_dtype(ours, stored.get_dtype(), file)
                        check_not_stored_twice(sources, ours, file, name)
                        sources[ours] = TensorSource(file, name, tuple(stored.get_shape()))
        except (SafetensorError, OSError) as exc:
            raise CorruptWeightsError(f"corrupt or truncated weight file {file}: {exc}") from exc
    return sources


def check_dtype(ours: str, dtype: str, file: Path) -> None:
    """Refuse a weight stored in a dtype other than ``FLOAT_STORAGE``, saying which dtypes are read.

    safetensors names floating-point formats ``F...`` (``F8_E4M3`` and ``F8_E5M2`` are float8, the dtype of
    quantised checkpoints), integers ``I...`` and ``U...``, booleans ``BOOL``.
    """
    if dtype in FLOAT_STORAGE:
        return
    accepted = ", ".join(FLOAT_STORAGE)
    if dtype.startswith("F"):
        raise DtypeMismatchError(f"weight dtype mismatch: {ours} is stored as {dtype} in {file.name}, a "
                                 f"floating-point format the loader does not read; it reads {accepted} only "
                                 "(a quantised checkpoint must be converted first)")
    raise DtypeMismatchError(f"weight dtype mismatch: {ours} is stored as {dtype} in {file.name}, a "
                             f"floating-point dtype ({accepted}) is expected")


def check_not_stored_twice(sources: dict[str, TensorSource], ours: str, file: Path, name: str) -> None:
    """Refuse a parameter a second file (or a second name) also holds: which copy would win is arbitrary."""
    first = sources.get(ours)
    if first is not None:
        raise DuplicateTensorError(f"{ours} is stored twice: as {first.name} in {first.file.name} and as "
                                   f"{name} in {file.name}; keep one copy")


def expected_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor of ``model``'s state dict, each once: a tied head is listed under the embedding only."""
    seen: set[int] = set()
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            tensors[name] = tensor
    return tensors


def check_tensors(
    expected: dict[str, torch.Tensor], sources: dict[str, TensorSource], config: ModelConfig, folder: Path
) -> None:
    """Raise unless every expected tensor is stored with the expected shape and nothing else is stored.

    With tied embeddings a stored ``lm_head.weight`` is a copy of the embedding and is not loaded.
    """
    for name, tensor in expected.items():
        source = sources.get(name)
        if source is None:
            hint = " (config.json has tie_word_embeddings false)" if name == TIED_HEAD else ""
            raise MissingTensorError(f"missing tensor {name} in the weight files of {folder}{hint}")
        if source.shape != tuple(tensor.shape):
            raise ShapeMismatchError(
                f"weight shape mismatch: {name} is {list(source.shape)} in the checkpoint, "
                f"{list(tensor.shape)} from config.json"
            )
    extra = sorted(set(sources) - set(expected) - ({TIED_HEAD} if config.tie_word_embeddings else set()))
    if extra:
        more = f" and {len(extra) - 1} more" if len(extra) > 1 else ""
        raise UnexpectedTensorError(
            f"unexpected tensor {sources[extra[0]].name}{more} in {sources[extra[0]].file.name}: "
            f"config.json describes no such parameter"
        )


@torch.no_grad()
def copy_weights(expected: dict[str, torch.Tensor], sources: dict[str, TensorSource]) -> None:
    """Copy each stored tensor into its parameter, one tensor (and one open file) at a time.

    ``safe_open`` maps the file into memory; ``get_tensor`` materialises a single tensor on the CPU, and
    ``copy_`` converts it to the parameter's dtype and device. A progress bar (one step per tensor) shows on
    stderr when stderr is a terminal.
    """
    by_file: dict[Path, list[str]] = {}
    for name in expected:
        by_file.setdefault(sources[name].file, []).append(name)
    with tqdm(total=len(expected), desc="loading weights", unit="tensor", disable=not sys.stderr.isatty(),
              leave=False) as bar:
        for file, names in by_file.items():
            try:
                for name in names:
                    # One open per tensor: the pages of the mapped file that a read touches count as this
                    # process's resident memory until the file is closed, so keeping one file open for all
                    # its tensors would add up to a whole shard on top of the weights already copied.
                    with safe_open(str(file), framework="pt") as handle:
                        expected[name].copy_(handle.get_tensor(sources[name].name))
                    bar.update()
            except (SafetensorError, OSError) as exc:
                raise CorruptWeightsError(f"corrupt or truncated weight file {file}: {exc}") from exc


# --8<-- [start:load_checkpoint]
def load_checkpoint(
    path: str | Path, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> LoadedModel:
    """Load a Hugging Face checkpoint folder (Qwen3.5 or Qwen2) into our model.

    Args:
        path: folder with ``config.json`` and safetensors weights.
        dtype: parameter dtype of the loaded model (weights are converted).
        device: where the parameters live.

    Raises:
        CheckpointError: a subclass naming the folder, file or tensor at fault.
    """
    folder = checkpoint_folder(path)
    raw = read_config_dict(folder)
    config, weights = parse_model_config(raw, folder), describe_weights(raw)
    sources = index_tensors(find_weight_files(folder))
    # Shapes are checked on a model built on the meta device, which allocates nothing, so a mismatch is
    # reported before any memory is used. ``build_model`` without a seed then allocates the parameters
    # on ``device`` without initialising them (no random fill that the checkpoint would overwrite), and
    # ``copy_weights`` fills every one of them: peak memory is the model plus one tensor being copied.
    check_tensors(expected_tensors(build_model(config, dtype, "meta")), sources, config, folder)
    model = build_model(config, dtype, device)
    expected = expected_tensors(model)
    copy_weights(expected, sources)
    count = sum(t.numel() for t in expected.values())
    return LoadedModel(model=model, config=config, path=folder, dtype=dtype, num_parameters=count,
                       weights=weights)
# --8<-- [end:load_checkpoint]
