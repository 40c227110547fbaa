"""No host stalls in a round: ``ModelRunner.launch`` and the model's forward never read device data back.

On a GPU, a read of device data (``.item()``, ``.tolist()``, ``nonzero``, a boolean-mask index, any size taken
from device data) makes the host wait until the device has finished everything queued before it, so round N+1
cannot be prepared while round N runs. A CPU has no device to wait for, so these tests watch the ops instead:
a dispatch mode marks every tensor derived from device data (the model's weights, the cache, the round's
uploaded inputs, and whatever is computed from them) and fails on any op that would read one back to the host.

What it would have caught, in the code before this check existed: ``RoundLayout.build`` (the layout is now
``stage_round``'s) and ``ModelRunner.prepare`` building device tensors from Python lists one by one (about ten
blocking copies per round on CUDA; here, more than one upload per round), ``CausalLM.prepare`` selecting
fresh state slots with a boolean mask (``batch.state_slots[fresh]``: a ``nonzero``), ``int(slot)`` on a device
tensor when recording state snapshots (``_local_scalar_dense``), and each sampled row's uniform number copied
from the host on its own.

Allowed on purpose: top-k sampling on a CPU keeps a ``nonzero`` shortcut (a full sort of a 248k vocabulary
costs tens of milliseconds on a CPU, and a CPU does not wait); on an accelerator the same function sorts
instead, and ``test_sampling`` checks that both give the same tokens. So sampled rows here use temperature and
top-p.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mini_deepinfer import SamplingParams
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.models import build_model
from mini_deepinfer.models.presets import qwen3_5_config
from mini_deepinfer.runtime.factory import build_engine
from mini_deepinfer.runtime.staging import Staging

aten = torch.ops.aten
READS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
         aten.equal.default, aten.is_nonzero.default, aten.repeat_interleave.Tensor, aten._unique2.default,
         aten.unique_consecutive.default, aten.unique_dim.default}
"""Ops whose result (or its size) is device data brought to the host."""


class HostReadError(AssertionError):
    pass


class DeviceDataWatch(TorchDispatchMode):
    """Marks tensors derived from device data; fails on any op that reads one back to the host."""

    def __init__(self, seeds: list[torch.Tensor]) -> None:
        super().__init__()
        self.device_data: set[int] = set()  # ids of live tensors (a tensor's == compares elements)
        self.mark(seeds)

    def mark(self, tensors) -> None:
        for t in tensors:
            if id(t) not in self.device_data:
                self.device_data.add(id(t))
                weakref.finalize(t, self.device_data.discard, id(t))

    def derived(self, values) -> bool:
        return any(isinstance(v, torch.Tensor) and id(v) in self.device_data for v in tree_flatten(values)[0])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        derived = self.derived((args, kwargs))
        if derived and (func in READS or self._boolean_index(func, args)):
            raise HostReadError(f"{func} reads device data back to the host")
        out = func(*args, **kwargs)
        if derived:
            self.mark(t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        return out

    @staticmethod
    def _boolean_index(func, args) -> bool:
        """``x[mask]`` and ``x[mask] = y``: the number of selected rows is device data."""
        if func not in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
            return False
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None)


@contextmanager
def watched_launches(engine, monkeypatch):
    """Run every ``launch`` under the watch; count the uploads each one makes."""
    runner = engine.runner
    seeds = list(runner.model.parameters()) + list(runner.cache.key_cache.values()) + \
        list(runner.cache.value_cache.values()) + list(runner.cache.conv_state.values()) + \
        list(runner.cache.recurrent_state.values()) + [runner.sampled]
    uploads: list[int] = []
    launch, upload = runner.launch, Staging.upload

    def counted_upload(self, device, into=None):
        views = upload(self, device, into)
        uploads[-1] += 1
        watch.mark(views.values())  # on an accelerator these are device tensors
        return views

    def watched_launch(plan):
        uploads.append(0)
        with watch:
            return launch(plan)

    watch = DeviceDataWatch(seeds)
    monkeypatch.setattr(Staging, "upload", counted_upload)
    monkeypatch.setattr(runner, "launch", watched_launch)
    yield uploads


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(qwen3_5_config("tiny", initializer_range=0.1), torch.float32, "cpu", seed=0)


PROMPTS = {"a": list(range(3, 20)), "b": [7, 8, 9], "c": list(range(40, 46))}


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "static_buffers"])
def test_decode_and_mixed_rounds_never_read_device_data_and_upload_once(model, monkeypatch, graphs):
    config = EngineConfig(kv_capacity=96, max_num_seqs=3, max_batched_tokens=8, chunked_prefill=True,
                          pipeline=True)
    engine = build_engine(model, config, use_graphs=graphs)
    params = {"a": SamplingParams(max_new_tokens=6), "b": SamplingParams(max_new_tokens=9),
              "c": SamplingParams(max_new_tokens=5, temperature=0.8, top_p=0.9, seed=1)}
    with watched_launches(engine, monkeypatch) as uploads:
        for rid, prompt in PROMPTS.items():
            engine.submit(rid, prompt, params[rid])
        engine.run()
    assert not [r.error for r in engine.requests.values() if r.error]
    kinds = {tuple(sorted({e.data["phase"] for e in engine.trace.of_kind("schedule") if e.round_id == r}))
             for r in range(1, engine.round_id + 1)}
    assert ("decode", "prefill") in kinds and ("decode",) in kinds, "mixed and decode-only rounds both ran"
    assert all(n == 1 for n in uploads), f"one upload per round, got {uploads}"
    assert all(len(r.output_token_ids) == r.params.max_new_tokens for r in engine.requests.values())


def test_the_watch_catches_a_read_of_device_data(model, monkeypatch):
    """The check can fail: a launch that reads one token back with ``int()`` is caught."""
    engine = build_engine(model, EngineConfig(kv_capacity=32, max_num_seqs=1))
    runner = engine.runner
    forward = runner.model.forward

    def forward_then_read(batch, cache):
        logits = forward(batch, cache)
        int(logits.argmax())  # the host waits for the device here
        return logits

    monkeypatch.setattr(runner.model, "forward", forward_then_read)
    with watched_launches(engine, monkeypatch):
        engine.submit("a", [1, 2, 3], SamplingParams(max_new_tokens=2))
        with pytest.raises(HostReadError, match="_local_scalar_dense"):
            engine.runner.launch(engine.schedule())
