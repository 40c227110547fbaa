"""Decode rounds on static buffers, captured as device graphs: one replay queues the whole step.

Scope: ``DecodeGraphs``. A decode round is padded to a fixed shape, a *bucket* (``rows`` sequences,
``context`` keys each: powers of two below the cache's state and KV capacities, then each capacity itself),
and laid out by ``stage_round`` in that bucket's static device buffer with one non-blocking copy from pinned
memory. Before any request runs, ``capture_all`` records every bucket's whole step (tokens still in flight
gathered from the previous round's sampled tokens, the model forward, greedy sampling, the non-finite flag)
into a graph, as DeepInfer, SGLang and vLLM do at start-up: ``torch.cuda.CUDAGraph`` on CUDA,
``torch.npu.NPUGraph`` through torch_npu on an Ascend NPU (written against its documented API; not run here).
A round then only copies its inputs into its bucket and replays: no capture and no blocking copy once requests
run. Padding rows and padding keys point at the cache's reserved dummy KV slot and dummy state slot, which no
request holds, so what they compute is never read. All buckets share one memory pool, captured largest first.

On CPU there is nothing to capture: the same static-buffer step runs eagerly, so a CPU test checks the layout,
the padding and the in-flight gather of the graph path against eager execution.

With ``compile=True`` (``--compile``) the step goes through ``torch.compile`` (``COMPILE_OPTIONS``: inductor,
Triton kernels on CUDA, C++ on a CPU), specialised to each bucket's fixed shape; ``capture_all`` compiles
every bucket before any request, and on an accelerator the compiled kernels are what the graph records.
``decode_step_ref``, the plain eager step, stays beside it as the reference (tests/test_compile.py compares
their greedy tokens in float32).

Non-scope: prefill and mixed rounds, speculative rounds, sampled (non-greedy) rows and kept logits: those run
eagerly (``ModelRunner.launch`` decides). DeepInfer's ``CudaGraphRunner`` buckets by token count instead and
its attention kernels read block tables directly; our attention gathers each decode's keys, so the context
length is part of the bucket.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tqdm import tqdm

from mini_deepinfer.core.plan import RoundPlan
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.forward_batch import RoundLayout
from mini_deepinfer.models.layers import CausalLM
from mini_deepinfer.runtime.device import device_module
from mini_deepinfer.runtime.sampling import flag_non_finite, greedy_tokens
from mini_deepinfer.runtime.staging import Padding, SeqInput, Staging, batch_from_views, stage_round

Segments = list[tuple[str, int, bool]]
"""Where each input of a round sits in its staging buffer: name, length, whether it holds floats."""
DecodeStep = Callable[[CausalLM, HybridCache, RoundLayout, Segments, torch.Tensor, torch.Tensor],
                      torch.Tensor]
"""``decode_step_ref`` or its compiled form: (model, cache, layout, segments, static, sampled) -> tokens."""

GRAPH_API = {"cuda": "CUDAGraph", "npu": "NPUGraph"}
"""The graph class of each accelerator's device module; ``module.graph(g, pool=...)`` captures into it."""
MIN_CONTEXT = 64
"""The smallest context bucket: shorter contexts share it (early decode steps do not each capture a graph)."""
WARMUP_STEPS = 2  # runs before a capture, so that lazily created library state exists before recording
COMPILE_OPTIONS = {"backend": "inductor", "dynamic": False, "fullgraph": True}
"""How ``compile=True`` compiles the decode step: inductor (Triton on CUDA, C++ on a CPU); ``dynamic=False``,
since every bucket has a fixed shape (one compiled graph each); ``fullgraph``: a graph break, or more
versions than the limit allows, is an error instead of a silent return to eager code."""


def powers_of_two_up_to(limit: int, start: int = 1) -> list[int]:
    """``start, 2 start, 4 start, ...`` below ``limit``, then ``limit`` itself."""
    sizes, size = [], start
    while size < limit:
        sizes.append(size)
        size *= 2
    return sizes + [limit]


# --8<-- [start:decode_step_ref]
def decode_step_ref(model: CausalLM, cache: HybridCache, layout: RoundLayout, segments: Segments,
                    static: torch.Tensor, sampled: torch.Tensor) -> torch.Tensor:
    """The decode step, eagerly: the batch as views of a static buffer, the forward, greedy tokens ``[rows]``
    (a non-finite row flagged). Tokens still in flight are gathered from ``sampled``."""
    views = Staging.views(segments, static)
    batch = batch_from_views(layout, views).with_in_flight(sampled)
    logits = model(batch, cache)
    return flag_non_finite(logits, greedy_tokens(logits))
# --8<-- [end:decode_step_ref]


# --8<-- [start:compiled_step]
def compiled_decode_step(buckets: int) -> DecodeStep:
    """``decode_step_ref`` through ``torch.compile`` with ``COMPILE_OPTIONS``; each bucket compiles on its
    first call (``capture_all`` makes that call before any request)."""
    import torch._dynamo  # only when compiling: it takes a while to import

    # Dynamo compiles a function once per input shape, and each bucket is a new shape; past its recompile
    # limit (8 by default) a full-graph function fails. Every engine adds its own buckets to the limit, since
    # one process (a benchmark, the tests) may build several engines.
    config = torch._dynamo.config
    config.recompile_limit += buckets
    config.accumulated_recompile_limit += buckets
    return torch.compile(decode_step_ref, **COMPILE_OPTIONS)
# --8<-- [end:compiled_step]


@dataclass
class Bucket:
    """One padded shape: its layout, its static input buffer, its output, and its graph."""

    padding: Padding
    layout: RoundLayout  # the layout ``stage_round`` gives every round of this bucket (host decisions)
    segments: Segments  # where each input sits in ``static``
    static: torch.Tensor  # on the device: the staging buffer every replay reads; rounds copy their inputs in
    tokens: torch.Tensor  # [rows] the step's sampled tokens
    graph: object | None = None  # None on CPU: the step runs eagerly on ``static``


class DecodeGraphs:
    """Decode rounds on static buffers, one bucket per padded shape, captured on an accelerator.

    Args:
        model: the model; its device decides whether graphs are captured (CUDA, NPU) or not (CPU).
        cache: the model's cache, built with dummy slots (``HybridCache(..., dummy_slots=True)``).
        compile: run the step through ``torch.compile`` (``compiled_decode_step``), every bucket compiled by
            ``capture_all``; otherwise the eager ``decode_step_ref``.
    """

    def __init__(self, model: CausalLM, cache: HybridCache, compile: bool = False) -> None:
        if cache.dummy_kv_slot is None:
            raise ValueError("graph execution needs a cache with dummy slots (HybridCache(dummy_slots=True))")
        self.model, self.cache = model, cache
        self.device = model.lm_head.weight.device
        self.capture = self.device.type in GRAPH_API
        self.rows = powers_of_two_up_to(max(cache.state_capacity, 1))
        self.contexts = powers_of_two_up_to(cache.kv_capacity, min(MIN_CONTEXT, cache.kv_capacity))
        self.compiled = compile
        buckets = len(self.rows) * len(self.contexts)
        self.step: DecodeStep = compiled_decode_step(buckets) if compile else decode_step_ref
        self.buckets: dict[tuple[int, int], Bucket] = {}
        self.pool: object | None = None
        self.sampled: torch.Tensor | None = None
        self.capture_s = 0.0  # seconds ``capture_all`` took
        self.last: tuple[int, int] | None = None  # the bucket (rows, context) of the last round

    @property
    def max_rows(self) -> int:
        """The largest bucket: as many rows as the cache has state slots (one per running request)."""
        return self.rows[-1]

    # --8<-- [start:capture_all]
    def capture_all(self, sampled: torch.Tensor) -> None:
        """Make every bucket a run can need, largest first, before any request (captured on an accelerator).

        ``sampled`` is where the runner keeps the last round's sampled tokens, in-flight inputs are gathered
        from it: its size is final, since each graph reads it at the address it had when captured.
        """
        if self.buckets:
            raise RuntimeError("the decode graphs are already captured")
        self.sampled = sampled
        shapes = [(rows, context) for rows in reversed(self.rows) for context in reversed(self.contexts)]
        started = time.perf_counter()
        what = "capturing decode graphs" if self.capture else "static decode buffers"
        bar = tqdm(shapes, desc=what, unit="bucket", leave=False, disable=not sys.stderr.isatty())
        for rows, context in bar:
            self.buckets[(rows, context)] = self._new_bucket(rows, context)
        module = device_module(self.device)
        if module is not None:
            module.synchronize()  # start-up: the last copies and captures are done before requests run
        self.capture_s = time.perf_counter() - started
    # --8<-- [end:capture_all]

    # --8<-- [start:accepts]
    def accepts(self, plan: RoundPlan) -> bool:
        """A plain greedy decode round that fits a bucket (everything else runs eagerly)."""
        seqs = plan.seqs
        plain_greedy = all(s.kind == "decode" and s.num_tokens == 1 and s.params.greedy for s in seqs)
        return (0 < len(seqs) <= self.rows[-1] and plain_greedy
                and max(len(s.context_slots) for s in seqs) <= self.contexts[-1])
    # --8<-- [end:accepts]

    # --8<-- [start:run]
    def run(self, seqs: list[SeqInput]) -> torch.Tensor:
        """Copy the round's inputs into its bucket's static buffer and replay; the sampled tokens ``[n]``."""
        rows = next(r for r in self.rows if r >= len(seqs))
        context = next(c for c in self.contexts if c >= max(s.context_len for s in seqs))
        bucket = self.buckets[(rows, context)]  # every bucket was made by ``capture_all``
        self.last = (rows, context)
        staging = Staging()
        if stage_round(seqs, staging, [], bucket.padding) != bucket.layout:
            raise RuntimeError(f"a decode round does not have the layout of its bucket {rows} x {context}")
        staging.upload(self.device, into=bucket.static)
        if bucket.graph is not None:
            bucket.graph.replay()
        else:
            self._step(bucket)
        return bucket.tokens[: len(seqs)]
    # --8<-- [end:run]

    # --8<-- [start:step]
    def _step(self, bucket: Bucket, step: DecodeStep | None = None) -> None:
        """What a graph holds: ``self.step`` (compiled or not) on the bucket, into ``bucket.tokens``."""
        step = step or self.step
        bucket.tokens.copy_(step(self.model, self.cache, bucket.layout, bucket.segments, bucket.static,
                                 self.sampled))
    # --8<-- [end:step]

    def _new_bucket(self, rows: int, context: int) -> Bucket:
        """Lay out an all-padding round of the shape in a static device buffer (filled from pinned memory),
        then compile its step (with ``compile``) and capture it (on an accelerator)."""
        padding = Padding(rows, context, self.cache.dummy_kv_slot, self.cache.dummy_state_slot)
        staging = Staging()
        layout = stage_round([], staging, [], padding)
        static = torch.empty(sum(n for _, n, _ in staging.segments()), dtype=torch.int64, device=self.device)
        staging.upload(self.device, into=static)
        bucket = Bucket(padding, layout, staging.segments(), static,
                        torch.zeros(rows, dtype=torch.int64, device=self.device))
        if self.compiled:
            self._compile(bucket)
        if self.capture:
            bucket.graph = self._capture(bucket)
        return bucket

    # --8<-- [start:capture]
    def _capture(self, bucket: Bucket) -> object:
        """Warm the step up on a side stream, then record it. Its buffers come from the shared pool."""
        module = device_module(self.device)
        side = module.Stream()
        side.wait_stream(module.current_stream())
        with module.stream(side):  # on the dummy round: it writes only the dummy slots
            for _ in range(WARMUP_STEPS):
                self._step(bucket)
        module.current_stream().wait_stream(side)
        graph = getattr(module, GRAPH_API[self.device.type])()
        with module.graph(graph, pool=self.pool):
            self._step(bucket)
        self.pool = self.pool if self.pool is not None else graph.pool()
        return graph
    # --8<-- [end:capture]

    def _compile(self, bucket: Bucket) -> None:
        """Compile the step for this bucket's shape by running it once on the dummy round (it writes only the
        dummy slots). The eager reference runs first: it folds the model's constants from its weights
        (``layers.Folded``), which a compiled step reads as they are."""
        self._step(bucket, decode_step_ref)
        self._step(bucket)
