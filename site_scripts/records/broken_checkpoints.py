"""The broken inputs of the reliability table: a random ``tiny`` checkpoint and broken copies of it.

Scope: writing the good checkpoint and every broken folder or file that ``gen_reliability.py``'s cases point
at (a corrupt or contradictory ``config.json``, truncated or mistyped weights, tokenizers whose ids lie, files
that point outside their folder, templates that never end), each made by a small function that changes one
thing. Non-scope: running the cases and the tables (``gen_reliability.py``), what the commands answer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def edit_config(folder: Path, change) -> None:
    """Apply ``change`` to the parsed ``config.json`` of ``folder`` and write it back."""
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    change(config)
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def truncate_weights(folder: Path) -> None:
    """Keep only the first half of every ``*.safetensors`` file."""
    for path in folder.glob("*.safetensors"):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


def swap_two_tokens(folder: Path) -> None:
    """A tokenizer of the same size whose ids for ``!`` and ``"`` are exchanged."""
    path = folder / "tokenizer.json"
    tokenizer = json.loads(path.read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    vocab["!"], vocab['"'] = vocab['"'], vocab["!"]
    path.write_text(json.dumps(tokenizer), encoding="utf-8")


def nan_embedding(folder: Path) -> None:
    """Every weight of the token embedding (and so of the tied head) set to NaN."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    name = next(n for n in tensors if n.endswith("embed_tokens.weight"))
    tensors[name] = tensors[name].fill_(float("nan"))
    save_file(tensors, str(path), metadata={"format": "pt"})


def int64_embedding(folder: Path) -> None:
    """The token embedding stored as int64: the right shape, a dtype no weight has."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    name = next(n for n in tensors if n.endswith("embed_tokens.weight"))
    tensors[name] = tensors[name].long()
    save_file(tensors, str(path), metadata={"format": "pt"})


def interval_zero(config: dict) -> None:
    """``full_attention_interval: 0``, with no ``layer_types`` list that would win over it."""
    config["text_config"].pop("layer_types")
    config["text_config"]["full_attention_interval"] = 0


def edit_json(path: Path, change) -> None:
    """Apply ``change`` to the parsed JSON file at ``path`` and write it back."""
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def index_outside(folder: Path) -> None:
    """An index whose every entry names the weights of the checkpoint next door, through ``..``."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        names = list(handle.keys())
    index = {"metadata": {}, "weight_map": dict.fromkeys(names, "../tiny/model.safetensors")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")


def float8_embedding(folder: Path) -> None:
    """The token embedding stored as float8 (``F8_E4M3``), the dtype of quantised checkpoints."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    name = next(n for n in tensors if n.endswith("embed_tokens.weight"))
    tensors[name] = tensors[name].to(torch.float8_e4m3fn)
    save_file(tensors, str(path), metadata={"format": "pt"})


def lying_tokenizers(root: Path) -> None:
    """Tokenizers whose ids lie: ``"`` given the id of ``!``; ``!`` given an id past the vocabulary; the
    added ``<|im_end|>`` listed with the id of ``!``; a stop id past the vocabulary."""
    def vocab(change):
        return lambda t: change(t["model"]["vocab"])

    edit_json(root / "ids-collide" / "tokenizer.json", vocab(lambda v: v.update({'"': v["!"]})))
    edit_json(root / "id-past-vocab" / "tokenizer.json", vocab(lambda v: v.update({"!": 300000})))
    edit_json(root / "added-on-vocab-id" / "tokenizer.json",
              lambda t: t["added_tokens"][2].update(id=t["model"]["vocab"]["!"]))
    edit_json(root / "stop-id-past-vocab" / "generation_config.json",
              lambda g: g.update(eos_token_id=[248046, 300000]))


def two_copies(folder: Path) -> None:
    """The weights in two files without an index: every tensor stored twice."""
    (folder / "model.safetensors").rename(folder / "model-a.safetensors")
    shutil.copy(folder / "model-a.safetensors", folder / "model-b.safetensors")


NEVER_ENDS = "{% set r = range(99999) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}"
RECURSES = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"


def prepare_hostile(root: Path, tiny: Path) -> None:
    """Checkpoints that point outside themselves, store a tensor twice, nest JSON too deep, type a token
    wrongly, carry templates that never end or recurse; a short context; a prompt file."""
    for name in ("index-outside", "two-copies", "deep-config", "eos-typed", "template-loops",
                 "template-recurses", "short-context"):
        shutil.copytree(tiny, root / name)
    index_outside(root / "index-outside")
    two_copies(root / "two-copies")
    (root / "deep-config" / "config.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    edit_json(root / "eos-typed" / "tokenizer_config.json", lambda c: c.update(eos_token={"content": 5}))
    for name, template in (("template-loops", NEVER_ENDS), ("template-recurses", RECURSES)):
        edit_json(root / name / "tokenizer_config.json", lambda c, t=template: c.update(chat_template=t))
    edit_config(root / "short-context", lambda c: c["text_config"].update(max_position_embeddings=16))
    (root / "prompts.txt").write_text("Hello\n", encoding="utf-8")


def prepare(root: Path) -> None:
    """The good checkpoint ``tiny`` and every broken folder or file the cases point at."""
    import torch

    from mini_deepinfer.tools.checkpoints import write_random_checkpoint

    tiny = root / "tiny"
    write_random_checkpoint(tiny, "tiny", seed=0, dtype=torch.float32)
    (root / "empty").mkdir()
    for name in ("corrupt-config", "truncated", "wrong-shapes", "wrong-type", "unknown-arch", "other-vocab",
                 "nan-embedding", "rope-string", "interval-zero", "int64-embedding", "float8-embedding",
                 "ids-collide", "id-past-vocab", "added-on-vocab-id", "stop-id-past-vocab",
                 "rotary-past-head"):
        shutil.copytree(tiny, root / name)
    lying_tokenizers(root)
    float8_embedding(root / "float8-embedding")
    edit_config(root / "rotary-past-head",
                lambda c: c["text_config"]["rope_parameters"].update(partial_rotary_factor=2.0))
    edit_config(root / "rope-string", lambda c: c["text_config"].update(rope_parameters="default"))
    edit_config(root / "interval-zero", interval_zero)
    int64_embedding(root / "int64-embedding")
    (root / "corrupt-config" / "config.json").write_text('{"architectures": [', encoding="utf-8")
    truncate_weights(root / "truncated")
    edit_config(root / "wrong-shapes", lambda c: c["text_config"].update(hidden_size=96))
    edit_config(root / "wrong-type", lambda c: c["text_config"].update(hidden_size="abc"))
    nan_embedding(root / "nan-embedding")
    edit_config(root / "unknown-arch", lambda c: c.update(architectures=["LlamaForCausalLM"],
                                                          model_type="llama"))
    swap_two_tokens(root / "other-vocab")
    (root / "prompts-gbk.txt").write_bytes("你好".encode("gbk"))
    prepare_hostile(root, tiny)
