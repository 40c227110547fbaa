"""Step 3 of training: the models' shapes, the windows they read, the schedule and the training loop.

Scope: the target's and the draft's shapes (transformers' ``Qwen3_5TextConfig`` with Qwen3.5's rotary
settings and tied embeddings), a freshly seeded model, training windows of ``SEQ_LEN + 1`` tokens in a seeded
order with the languages in fixed shares per batch, the learning-rate schedule (warm-up, cosine decay to
10 %), next-token loss, dropout on the residual branches, and the loop itself: AdamW, the forward and backward
passes under bfloat16 autocast, gradient clipping, the loss curve, held-out points, and intermediate weights.

The models are transformers' ``Qwen3_5ForCausalLM``: the engine's own model runs without autograd (its
kernels write their outputs in place), so it cannot take a backward pass. Training is deterministic for a
given number of threads: seeded initialisation, a seeded order of windows, seeded dropout.

Non-scope: the loss of the distilled draft and its batches (``distill.py``), what a held-out point measures
(``evaluate.py``), which schedule each model gets (``run.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

SEQ_LEN = 256
BATCH = 16
COMPUTE = torch.bfloat16  # autocast's matmul type; the weights and the optimizer stay float32
LOG_EVERY = 10

# --8<-- [start:shapes]
TARGET_SHAPE = dict(hidden_size=256, intermediate_size=768, num_attention_heads=8, num_key_value_heads=2,
                    head_dim=32, linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32,
                    linear_value_head_dim=32,
                    layer_types=["linear_attention"] * 3 + ["full_attention"])
DRAFT_SHAPE = dict(hidden_size=192, intermediate_size=640, num_attention_heads=6, num_key_value_heads=2,
                   head_dim=32, linear_num_key_heads=3, linear_num_value_heads=6, linear_key_head_dim=32,
                   linear_value_head_dim=32, layer_types=["linear_attention", "full_attention"])
# --8<-- [end:shapes]


# --8<-- [start:schedule]
@dataclass(frozen=True)
class Schedule:
    """How one model trains: steps, peak learning rate and warm-up steps (cosine decay to 10 %), windows per
    batch, and the dropout on each layer's two residual branches (0: none)."""

    steps: int
    peak_lr: float
    warmup: int
    batch: int = BATCH
    dropout: float = 0.0

    def lr(self, step: int) -> float:
        if step < self.warmup:
            return self.peak_lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
# --8<-- [end:schedule]


def model_config(shape: dict[str, Any], vocab_size: int, eos_ids: Sequence[int]):
    """transformers' ``Qwen3_5TextConfig`` for ``shape``: Qwen3.5's rotary settings, tied embeddings."""
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        vocab_size=vocab_size, num_hidden_layers=len(shape["layer_types"]), **shape,
        tie_word_embeddings=True, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        eos_token_id=list(eos_ids), bos_token_id=eos_ids[-1], pad_token_id=eos_ids[-1],
    )


def new_model(config, seed: int):
    """A freshly initialised ``Qwen3_5ForCausalLM`` (float32), the same for the same seed."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    torch.manual_seed(seed)
    return Qwen3_5ForCausalLM(config)


class Windows:
    """Training windows of ``SEQ_LEN + 1`` tokens in a seeded order (a new one after each pass over a
    language's windows), each batch holding the languages in the proportions of ``shares`` (the same number
    of each when it is not given)."""

    def __init__(self, streams: dict[str, torch.Tensor], seed: int, seq_len: int = SEQ_LEN,
                 shares: dict[str, int] | None = None) -> None:
        self.seq_len = seq_len
        self.generator = torch.Generator().manual_seed(seed)
        self.streams = list(streams.values())
        self.shares = [1 if shares is None else shares[name] for name in streams]
        self.starts = [torch.arange(0, len(s) - seq_len - 1, seq_len) for s in self.streams]
        self.orders = [torch.randperm(len(s), generator=self.generator) for s in self.starts]
        self.positions = [0] * len(self.streams)

    def takes(self, size: int) -> list[int]:
        """How many of ``size`` windows each language gives: in proportion to its share, rounded down, the
        rest from the first language."""
        takes = [size * share // sum(self.shares) for share in self.shares]
        takes[0] += size - sum(takes)
        return takes

    def batch(self, size: int) -> torch.Tensor:
        """The next ``size`` windows ``[size, SEQ_LEN + 1]``, as ``takes(size)`` says per language."""
        rows = []
        for i, (stream, starts, take) in enumerate(zip(self.streams, self.starts, self.takes(size))):
            if self.positions[i] + take > len(self.orders[i]):
                self.orders[i], self.positions[i] = torch.randperm(len(starts), generator=self.generator), 0
            chosen = starts[self.orders[i][self.positions[i]: self.positions[i] + take]]
            self.positions[i] += take
            rows += [stream[s: s + self.seq_len + 1] for s in chosen.tolist()]
        return torch.stack(rows)


def next_token_loss(model, x: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each window's tokens 2..n given the ones before."""
    logits = model(input_ids=x[:, :-1], use_cache=False).logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


def residual_dropout(model, p: float) -> list[Any]:
    """Dropout on the output of every token mixer and MLP, before it joins the residual stream; returns the
    hooks' handles (remove them when training ends).

    transformers' Qwen3.5 has no dropout there (only on attention weights); a corpus of a few megabytes read
    for several passes needs it, or the model learns the training text rather than the language.
    """

    def hook(module, _inputs, output):
        if isinstance(output, tuple):  # full attention returns (output, weights)
            return (F.dropout(output[0], p, module.training), *output[1:])
        return F.dropout(output, p, module.training)

    handles = []
    for layer in model.model.layers:
        mixer = layer.linear_attn if hasattr(layer, "linear_attn") else layer.self_attn
        handles += [mixer.register_forward_hook(hook), layer.mlp.register_forward_hook(hook)]
    return handles


# --8<-- [start:train]
def train(model, windows, schedule: Schedule, loss_fn, name: str, evaluate: Callable | None = None,
          eval_every: int = 0, stop_after: int | None = None, partial: Path | None = None) -> dict[str, Any]:
    """AdamW over ``schedule.steps`` batches (or only the first ``stop_after`` of them), the forward and
    backward passes under ``COMPUTE`` autocast; returns the loss curve, held-out points and wall time.
    At each held-out point the weights are also saved under ``partial`` when it is given."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=schedule.peak_lr, betas=(0.9, 0.95),
                                  weight_decay=0.1)
    hooks = residual_dropout(model, schedule.dropout) if schedule.dropout else []
    curve, points, running, started = [], [], [], time.perf_counter()
    model.train()
    for step in range(schedule.steps if stop_after is None else stop_after):
        for group in optimizer.param_groups:
            group["lr"] = schedule.lr(step)
        with torch.autocast("cpu", dtype=COMPUTE):
            loss = loss_fn(model, windows.batch(schedule.batch))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        running.append(loss.item())
        if (step + 1) % LOG_EVERY == 0 or step + 1 == schedule.steps:
            curve.append([step + 1, round(sum(running) / len(running), 4)])
            running = []
            print(f"{name} step {step + 1}/{schedule.steps} loss {curve[-1][1]:.4f} "
                  f"lr {schedule.lr(step):.2e} {time.perf_counter() - started:.0f} s", flush=True)
        if evaluate is not None and eval_every and (step + 1) % eval_every == 0 and step + 1 < schedule.steps:
            model.eval()
            points.append({"step": step + 1, **evaluate(model)})
            print(f"{name} held-out {points[-1]}", flush=True)
            if partial is not None:
                save_partial(model, partial / f"{name}-step{step + 1}.safetensors")
            model.train()
    for handle in hooks:
        handle.remove()
    model.eval()
    return {"loss_every": LOG_EVERY, "loss": curve, "held_out_during": points,
            "wall_s": round(time.perf_counter() - started, 1)}
# --8<-- [end:train]


def save_partial(model, path: Path) -> None:
    """An intermediate copy of the weights (never committed), written whole or not at all: into a hidden
    file beside ``path``, renamed over it when complete; a full disk is one line (``NoSpaceError``)."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    from mini_deepinfer.tools.files import default_file_mode, disk_errors

    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    scratch = path.with_name(f".{path.name}.partial")
    try:
        with disk_errors(path, (SafetensorError,)):
            save_file(state, str(scratch))
        scratch.chmod(default_file_mode())  # safetensors makes it owner-only; use the usual mode
        scratch.replace(path)
    finally:
        scratch.unlink(missing_ok=True)
