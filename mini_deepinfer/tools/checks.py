"""Checks the commands run after an engine run, against an independent recomputation.

Scope: :func:`cold_difference` (how far a request's live cache, all three parts, is from a cold recomputation
of the prefix it should hold) and :func:`check_greedy` (the delivered tokens against a plain greedy run of the
target, alone, in a fresh cache). ``generate --check-greedy``, the two-model demo and the tests use them.
Also :func:`check_positions`, the check before a run that no request goes past the positions the model was
built for.
Non-scope: running the engine being checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.request import Request
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.layers import CausalLM
from mini_deepinfer.runtime.factory import build_engine
from mini_deepinfer.runtime.staging import batch_from_sequences

__all__ = ["check_greedy", "check_positions", "cold_difference"]


def check_positions(needed: int, limit: int, what: str, model: str) -> None:
    """Refuse ``needed`` positions (a prompt plus its new tokens) beyond ``limit``, the model's
    ``max_position_embeddings``: past it the rotary positions are ones the model never saw, and nothing in its
    output would say so."""
    if needed > limit:
        raise ValueError(f"{what} needs {needed} positions; {model} has max_position_embeddings {limit}")


# --8<-- [start:cold_difference]
@torch.no_grad()
def cold_difference(model: CausalLM, cache: HybridCache, tokens: Sequence[int], kv_slots: Sequence[int],
                    state_slot: int) -> dict[str, float]:
    """How far a request's live cache is from a cold recomputation of ``tokens`` in a fresh cache.

    Args:
        model: the model that wrote ``cache``.
        cache: the live cache.
        tokens: the prefix the cache should hold (positions 0..len-1).
        kv_slots: the request's KV slots, position order (at least ``len(tokens)``).
        state_slot: the request's state slot.

    Returns:
        The largest absolute difference of each part: ``kv`` (keys and values of every full-attention layer
        at the prefix's slots), ``conv`` (convolution windows) and ``recurrent`` (recurrent states).
    """
    n = len(tokens)
    cold = HybridCache(model.config, n, 1, cache.dtype, cache.device)
    model(batch_from_sequences([list(tokens)], [0], [list(range(n))], [0], device=cache.device), cold)
    rows = torch.tensor(list(kv_slots[:n]), dtype=torch.int64, device=cache.device)

    def worst(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
        return max((float((a.float() - b.float()).abs().max()) for a, b in pairs), default=0.0)

    return {
        "kv": worst([(cache.key_cache[i][rows], cold.key_cache[i]) for i in cache.key_cache]
                    + [(cache.value_cache[i][rows], cold.value_cache[i]) for i in cache.value_cache]),
        "conv": worst([(cache.conv_state[i][state_slot], cold.conv_state[i][0]) for i in cache.conv_state]),
        "recurrent": worst([(cache.recurrent_state[i][state_slot], cold.recurrent_state[i][0])
                            for i in cache.recurrent_state]),
    }
# --8<-- [end:cold_difference]


# --8<-- [start:check_greedy]
def check_greedy(model: CausalLM, requests: Sequence[Request]) -> dict:
    """Compare what each request delivered with an independent plain greedy run of ``model`` (the target).

    Each request runs alone, without a draft, in a fresh cache, for as many tokens as it delivered. Only
    that prefix is compared: a request cancelled after N tokens says nothing about the tokens after N.
    """
    compared, differing = 0, []
    for req in requests:
        delivered = list(req.output_token_ids)
        if not delivered:
            continue
        capacity = req.prompt_len + len(delivered)
        plain = build_engine(model, EngineConfig(kv_capacity=capacity), batching=False)
        params = replace(req.params, max_new_tokens=len(delivered), temperature=0.0)
        plain.submit(req.request_id, list(req.prompt_token_ids), params)
        plain.run()
        compared += len(delivered)
        if plain.requests[req.request_id].output_token_ids != delivered:
            differing.append(req.request_id)
    return {"compared_tokens": compared, "passed": not differing, "differing_requests": differing,
            "note": "only the delivered prefix is compared"}
# --8<-- [end:check_greedy]
