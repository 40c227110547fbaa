"""Lesson 9's check: ``parameter_name`` (a checkpoint's tensor name to ours) and ``load_checkpoint``.

Scope: small checkpoints written in code with the checkpoint writer's own pieces (``tools.checkpoints``:
``preset``, ``write_weights``, ``write_json``), once per process in a temporary folder: a ``tiny`` Qwen3.5 in
the released multimodal layout (``text_config`` nesting, the text model under ``model.language_model.``,
shards with an index) that also stores a vision tower tensor (``model.visual.``), an MTP head tensor
(``mtp.``) and a copy of its tied ``lm_head.weight``; an untied Qwen2 in one flat file; and two broken
copies of the Qwen2 (a tensor config.json does not describe, in a shard of its own; a tensor of the wrong
shape). Each is loaded with the learner's
functions and with the engine's: every tensor name mapped as the engine maps it, the loaded models equal
tensor for tensor (float32 and bfloat16), the same parameter count, and the broken ones refused with the
engine's error before any weight is read. Non-scope: finding shard files, reading ``config.json``, dtype and
path checks (the loader's other functions, the engine's own here), tokenizers.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mini_deepinfer.models import loader
from mini_deepinfer.models.config import config_from_hf_dict
from mini_deepinfer.models.loader import WEIGHTS_INDEX_FILE
from mini_deepinfer.tools.checkpoints import preset, write_json, write_weights

from ..exercise import Check
from ..words import Words
from .torch_scenes import fill

QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 96, "hidden_size": 32,
         "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "rms_norm_eps": 1e-6, "rope_theta": 10000, "max_position_embeddings": 512,
         "tie_word_embeddings": False, "initializer_range": 0.1}
EXTRAS = {"model.visual.blocks.0.attn.qkv.weight": (4, 4), "mtp.fc.weight": (4, 4)}
_FOLDERS: dict[str, Path] = {}


def _root() -> Path:
    if "root" not in _FOLDERS:
        _FOLDERS["root"] = Path(tempfile.mkdtemp(prefix="workbook-lesson-09-"))
        atexit.register(shutil.rmtree, _FOLDERS["root"], True)
    return _FOLDERS["root"]


def _write(name: str, config_dict: dict, max_shard_size: int, extra: dict[str, torch.Tensor]) -> Path:
    """A checkpoint folder: config.json, random weights from the writer, and ``extra`` tensors in one more
    file (listed in the index when there is one)."""
    folder = _root() / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    write_json(folder / "config.json", config_dict)
    write_weights(folder, config_from_hf_dict(config_dict), torch.float32, 0, max_shard_size)
    if extra:
        save_file(extra, str(folder / "model-extra.safetensors"))
        index_path = folder / WEIGHTS_INDEX_FILE
        if index_path.is_file():
            index = json.loads(index_path.read_text())
            index["weight_map"].update({tensor: "model-extra.safetensors" for tensor in extra})
            index_path.write_text(json.dumps(index))
    return folder


def checkpoint(name: str) -> Path:
    """The folder of checkpoint ``name`` (written the first time it is asked for)."""
    if name not in _FOLDERS:
        gen = torch.Generator().manual_seed(1)
        if name == "qwen3.5":
            config_dict = json.loads(json.dumps(preset("tiny").config))
            config_dict["text_config"].update(vocab_size=128, eos_token_id=1)
            extra = {n: torch.randn(*shape, generator=gen) for n, shape in EXTRAS.items()}
            extra["lm_head.weight"] = torch.randn(128, 64, generator=gen)
            _FOLDERS[name] = _write(name, config_dict, 200_000, extra)
        elif name == "qwen2":
            _FOLDERS[name] = _write(name, QWEN2, 1 << 30, {})
        elif name == "qwen2, an unknown tensor":
            _FOLDERS[name] = _write(name, QWEN2, 40_000, {"model.layers.0.mlp.gate.bias": torch.zeros(3)})
        else:  # "qwen2, a wrong shape": one more layer's worth of heads than config.json says
            _FOLDERS[name] = _write(name, {**QWEN2, "num_key_value_heads": 4}, 1 << 30, {})
            write_json(_FOLDERS[name] / "config.json", QWEN2)
    return _FOLDERS[name]


GOOD = ("qwen3.5", "qwen2")
BROKEN = ("qwen2, an unknown tensor", "qwen2, a wrong shape")


def stored_names(folder: Path) -> list[str]:
    """Every tensor name in the folder's safetensors files, in file order."""
    names = []
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            names += list(handle.keys())
    return names


PROBES = ("model.language_model.embed_tokens.weight", "model.language_model.norm.weight", "lm_head.weight",
          "model.visual.merger.linear_fc1.weight", "mtp.layers.0.mlp.up_proj.weight", "model.norm.weight",
          "model.embed_tokens.weight", "model.language_modelx.weight", "visual.model.language_model.a",
          "mtp_not_a_head.weight")


def names() -> dict[str, object]:
    """``parameter_name`` of every stored name of both good checkpoints and of a few probes."""
    every = [n for name in GOOD for n in stored_names(checkpoint(name))] + list(PROBES)
    return {n: loader.parameter_name(n) for n in every}


def load(name: str, dtype: torch.dtype = torch.float32) -> dict[str, object]:
    """Load checkpoint ``name``: its tensors, dtype and parameter count, or the error it was refused with."""
    try:
        loaded = loader.load_checkpoint(checkpoint(name), dtype=dtype)
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken checkpoint's refusal is what is compared
        return {"error": f"{type(exc).__name__}: {exc}"}
    state = {k: v.detach().clone() for k, v in loaded.model.state_dict().items()}
    return {"state": state, "dtype": loaded.dtype, "num_parameters": loaded.num_parameters,
            "config": loaded.config, "weights": loaded.weights}


NAME_DIFFERS = Words("{name} -> yours {actual!r}, the engine's {expected!r}",
                     "{name} -> 你的是 {actual!r}，引擎的是 {expected!r}")


def names_equal_engine(trial) -> Words | None:
    want, got = trial.engine(names), trial.learner(names)
    for name, expected in want.items():
        if got[name] != expected:
            return NAME_DIFFERS.format(name=name, actual=got[name], expected=expected)
    return None


RULE = Words("{name} -> {actual!r}; the lesson's rule gives {expected!r} (model.language_model.X becomes "
             "model.X, model.visual. and mtp. are skipped with None, any other name stays)",
             "{name} -> {actual!r}；按本课的规则应是 {expected!r}（model.language_model.X 变成 model.X，"
             "model.visual. 与 mtp. 返回 None 跳过，其他名字不变）")


def _rule(name: str) -> str | None:
    if name.split(".")[0] == "mtp" or name.startswith("model.visual."):
        return None
    text = "model.language_model."
    return "model." + name[len(text):] if name.startswith(text) else name


def names_follow_the_rule(trial) -> Words | None:
    for name, actual in trial.learner(names).items():
        if actual != _rule(name):
            return RULE.format(name=name, actual=actual, expected=_rule(name))
    return None


LOAD_DIFFERS = Words("{checkpoint} ({dtype}): {what}", "{checkpoint}（{dtype}）：{what}")
A_MODEL = Words("a model", "一个模型")
OUTCOME_DIFFERS = Words("yours gives {got}; the engine's gives {want}",
                        "你的结果是 {got}；引擎的结果是 {want}")
PARAMETER_DIFFERS = Words("parameter {key} differs from the engine's load", "参数 {key} 与引擎加载的不同")
OTHER_PARAMETERS = Words("the model has other parameters than the engine's load",
                         "模型的参数与引擎加载的不是同一组")
FIELD_DIFFERS = Words("{key} is {got}, the engine's load says {want}", "{key} 是 {got}，引擎加载的是 {want}")


def _first_difference(want: dict, got: dict) -> Words | None:
    if "error" in want or "error" in got:
        if want.get("error") == got.get("error"):
            return None
        return fill(OUTCOME_DIFFERS, got=got.get("error", A_MODEL), want=want.get("error", A_MODEL))
    for key, tensor in want["state"].items():
        mine = got["state"].get(key)
        if mine is None or mine.dtype != tensor.dtype or not torch.equal(mine, tensor):
            return PARAMETER_DIFFERS.format(key=key)
    if set(got["state"]) != set(want["state"]):
        return OTHER_PARAMETERS
    for key in ("dtype", "num_parameters", "config", "weights"):
        if got[key] != want[key]:
            return FIELD_DIFFERS.format(key=key, got=got[key], want=want[key])
    return None


def _loads_equal(cases: tuple[tuple[str, torch.dtype], ...]) -> Callable:
    def check(trial) -> Words | None:
        for name, dtype in cases:
            what = _first_difference(trial.engine(load, name, dtype), trial.learner(load, name, dtype))
            if what is not None:
                dtype_name = str(dtype).removeprefix("torch.")
                return fill(LOAD_DIFFERS, checkpoint=name, dtype=dtype_name, what=what)
        return None
    return check


CHECKS = (
    Check(Words("the Qwen3.5 and Qwen2 checkpoints load into the engine's model, tensor for tensor",
                "Qwen3.5 与 Qwen2 检查点加载出的模型与引擎的逐个张量相同"),
          _loads_equal(tuple((name, torch.float32) for name in GOOD))),
    Check(Words("the text model's prefix goes, the vision tower and the MTP head are skipped",
                "去掉文本模型的前缀，跳过视觉塔和 MTP 头"), names_follow_the_rule, "loader"),
    Check(Words("every tensor name is mapped as the engine maps it", "每个张量名都与引擎映射得一样"),
          names_equal_engine, "loader"),
    Check(Words("a checkpoint with an unknown tensor or a wrong shape is refused as the engine refuses it",
                "含未知张量或形状不对的检查点，与引擎一样被拒绝"),
          _loads_equal(tuple((name, torch.float32) for name in BROKEN)), "loader"),
    Check(Words("loading in bfloat16 gives the engine's bfloat16 model",
                "以 bfloat16 加载得到与引擎相同的模型"),
          _loads_equal(tuple((name, torch.bfloat16) for name in GOOD)), "loader"),
)
