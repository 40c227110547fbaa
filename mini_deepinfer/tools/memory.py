"""How much memory a cache asks for, checked before it is allocated.

Scope: the bytes of a ``HybridCache`` from the model's configuration and the two capacities
(:func:`cache_bytes`, the same shapes ``models/cache.py`` allocates; a test holds the two together), the
memory a device has (:func:`device_memory`), and :func:`check_cache_fits`, which turns a request for more
than that into one line naming the flags, before the allocator is asked. Standard library only; the device
query imports torch only for an accelerator.
Non-scope: allocating anything, the weights' own memory, and whether the operating system would really give
that much (a cache that fits the total may still fail; the allocator's error is then reported by the command).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["cache_bytes", "check_cache_fits", "device_memory", "format_bytes"]

FLOAT32_BYTES = 4  # recurrent states are always float32


def cache_bytes(config: Any, kv_capacity: int, state_capacity: int, itemsize: int,
                dummy_slots: bool = False) -> dict[str, int]:
    """Bytes of the cache ``HybridCache(config, kv_capacity, state_capacity, ...)`` allocates.

    Args:
        config: a model configuration (``models.config``).
        kv_capacity: KV slots; ``state_capacity``: state slots.
        itemsize: bytes per element of the model dtype (keys, values, convolution windows).
        dummy_slots: one more slot of each kind (captured decode graphs).

    Returns:
        ``{"kv": bytes, "state": bytes}``.
    """
    kv_rows, state_rows = kv_capacity + dummy_slots, state_capacity + dummy_slots
    per_layer = 2 * config.num_key_value_heads * config.head_dim * itemsize  # keys and values
    per_kv_row = per_layer * len(config.full_attention_layers)
    linear = config.linear_attention_layers
    per_state_row = 0
    if linear:
        conv = config.linear_conv_dim * (config.linear_conv_kernel_dim - 1) * itemsize
        recurrent = (config.linear_num_value_heads * config.linear_key_head_dim * config.linear_value_head_dim
                     * FLOAT32_BYTES)
        per_state_row = len(linear) * (conv + recurrent)
    return {"kv": kv_rows * per_kv_row, "state": state_rows * per_state_row}


def device_memory(device: Any) -> tuple[int, str] | None:
    """The bytes a cache may take on ``device`` (a ``torch.device``, or ``"cpu"``), and where they are, for a
    message: the machine's physical memory for the cpu, the free memory of an accelerator; None when it
    cannot say."""
    if getattr(device, "type", device) == "cpu":
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "of memory on this machine"
        except (ValueError, OSError, AttributeError):
            return None
    import torch

    try:
        return int(torch.get_device_module(device).mem_get_info(device)[0]), f"free on {device}"
    except (RuntimeError, AttributeError, AssertionError):
        return None


def format_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KiB``; binary units up to PiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"


def check_cache_fits(needed: dict[str, int], available: tuple[int, str] | None, what: str) -> None:
    """Raise ValueError when the cache needs more bytes than the device has.

    Args:
        needed: ``{"kv": bytes, "state": bytes}`` (add the draft's cache to it first).
        available: what the device has, from :func:`device_memory`; None skips the check.
        what: the settings that ask for it, in the command's words (``--cache-capacity 1000 ...``).
    """
    total = needed["kv"] + needed["state"]
    if available is None or total <= available[0]:
        return
    raise ValueError(f"{what} ask for {format_bytes(total)} of cache (KV {format_bytes(needed['kv'])}, "
                     f"state {format_bytes(needed['state'])}); there are {format_bytes(available[0])} "
                     f"{available[1]}")
