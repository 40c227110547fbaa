"""The prefix cache's bookkeeping, with the toy runner: what a prompt reuses, what is evicted, and a fuzz.

The toy here also keeps a "recurrent state" per state slot (the tuple of tokens it has seen) and copies it to
and from snapshot slots as the plans say, so a wrong restore, a snapshot slot reused while still indexed, or
a shared KV slot that is written shows up as a wrong tuple or a failed check in ``launch``. The engine turns a
runner's exception into an ``error`` finish, so every test checks that no request ended with one.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mini_deepinfer import SamplingParams, ToyRunner
from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.prefix_cache import PrefixCache
from mini_deepinfer.core.slots import SlotPool


class StatefulToy(ToyRunner):
    """The toy runner with a token-tuple "state" per state slot and snapshot slots that copy it."""

    def __init__(self) -> None:
        super().__init__()
        self.state: dict[int, tuple[int, ...]] = {}
        self.snapshots: dict[int, tuple[int, ...]] = {}
        self.kv_pool: SlotPool | None = None

    def launch(self, plan):
        for seq in plan.seqs:
            shared = [s for s in seq.new_slots if self.kv_pool.holders(s) != 1]
            assert not shared, f"{seq.request_id} writes shared slots {shared}"
            tokens = self._resolve(seq)
            if seq.restore is not None:
                self.state[seq.state_slot] = self.snapshots[seq.restore]
            elif seq.start_pos == 0:
                self.state[seq.state_slot] = ()
            context = tuple(self.cached_tokens(list(seq.context_slots[: seq.start_pos])))
            assert self.state[seq.state_slot] == context, f"{seq.request_id}: state != its cached tokens"
            saves = dict(seq.saves)
            for i, token in enumerate(tokens):
                self.state[seq.state_slot] += (token,)
                if seq.start_pos + i + 1 in saves:
                    self.snapshots[saves[seq.start_pos + i + 1]] = self.state[seq.state_slot]
        return super().launch(plan)


def engine_with_cache(capacity=64, block=4, snapshots=8, **kw) -> BatchEngine:
    runner = StatefulToy()
    config = EngineConfig(kv_capacity=capacity, state_capacity=4, max_num_seqs=4, prefix_cache=True,
                          prefix_block=block, prefix_snapshots=snapshots, **kw)
    engine = BatchEngine(runner, config)
    runner.kv_pool = engine.kv_pool
    return engine


def run_one(engine, rid, prompt, max_new=2):
    engine.submit(rid, prompt, SamplingParams(max_new_tokens=max_new))
    engine.run()
    assert engine.requests[rid].error is None, engine.requests[rid].error  # the toy's checks held
    return engine.requests[rid]


def test_a_prompt_reuses_whole_blocks_and_the_tail_of_a_cached_prompt_and_computes_one_token_at_least():
    engine = engine_with_cache(block=4)
    run_one(engine, "a", list(range(10)))  # blocks 0..3, 4..7 and the tail 8..9, each with a snapshot
    assert run_one(engine, "b", list(range(10)) + [50, 51]).cached_prompt_tokens == 10  # the tail
    assert run_one(engine, "c", list(range(6)) + [60, 61]).cached_prompt_tokens == 4  # diverges in block 1
    assert run_one(engine, "d", list(range(10))).cached_prompt_tokens == 8  # the same prompt: one token left
    assert run_one(engine, "e", [99] + list(range(10))).cached_prompt_tokens == 0


def test_without_a_snapshot_a_block_end_is_not_a_reuse_point_for_a_model_with_state():
    engine = engine_with_cache(block=4, snapshots=1)  # one snapshot slot: only the first save point gets one
    run_one(engine, "a", list(range(10)))
    blocks = sorted(engine.prefix_cache.blocks.values(), key=lambda b: b.end)
    assert [b.snapshot is not None for b in blocks] == [True, False, False]
    assert run_one(engine, "b", list(range(10)) + [7]).cached_prompt_tokens == 4


def test_eviction_takes_the_least_recently_used_unheld_leaf_and_never_a_block_a_request_holds():
    kv = SlotPool(32)
    cache = PrefixCache(kv, SlotPool(8, "snapshot"), block=2)
    for rid, prompt in (("a", [1, 2, 3, 4, 5]), ("b", [7, 8, 9])):
        cache.acquire(rid, prompt)
        slots = kv.allocate(len(prompt))
        cache.save_points(rid, 0, len(prompt), len(prompt))
        cache.insert(rid, prompt, slots, len(prompt))
        cache.release(rid)
        kv.free(slots)  # the request is gone; the index still holds the slots
    held = cache.acquire("c", [1, 2, 3, 4, 6])  # holds [1, 2], [3, 4]
    assert held.length == 4
    cache.evict_until(lambda: False)  # evict everything it may
    assert sorted(b.tokens for b in cache.blocks.values()) == [(1, 2), (3, 4)]
    cache.release("c")
    kv.free(held.slots)
    cache.clear()
    assert kv.num_free == 32 and cache.snapshot_pool.num_free == 8


def test_a_running_request_keeps_its_slots_when_admitting_another_evicts_the_cache():
    engine = engine_with_cache(capacity=24, block=4)
    run_one(engine, "a", list(range(12)), max_new=1)  # leaves 12 slots in the index
    engine.submit("b", list(range(8)) + [70, 71], SamplingParams(max_new_tokens=4))
    engine.step()  # b reuses 8 slots of a's prompt and runs
    engine.submit("c", [90 + i for i in range(10)], SamplingParams(max_new_tokens=3))  # needs eviction
    engine.run()  # c fits only once b is done: b's reservation is not the cache's to evict
    assert engine.requests["b"].cached_prompt_tokens == 8
    assert engine.requests["b"].output_token_ids == [72, 73, 74, 75]
    assert engine.requests["c"].output_token_ids == [100, 101, 102]


STEMS = [list(range(100, 113)), list(range(200, 209)), list(range(100, 106)) + [300, 301, 302]]
requests_strategy = st.lists(
    st.tuples(
        st.integers(0, 8),  # arrival round
        st.integers(0, 2),  # stem
        st.integers(0, 13),  # stem tokens kept (0: none)
        st.integers(0, 5),  # own tokens after the stem
        st.integers(0, 4),  # max_new_tokens
        st.one_of(st.none(), st.integers(1, 12)),  # cancel after this many rounds
    ),
    min_size=1, max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=requests_strategy, block=st.integers(1, 5), snapshots=st.integers(1, 6),
       budget=st.integers(2, 12), chunked=st.booleans(), pipeline=st.booleans(), spare=st.integers(0, 12))
def test_prefix_cache_bookkeeping_frees_no_slot_twice_leaks_none_and_writes_none_while_shared(
        reqs, block, snapshots, budget, chunked, pipeline, spare):
    prompts = {f"r{i}": STEMS[stem][:keep] + [500 + 10 * i + j for j in range(own + (keep == 0))]
               for i, (_, stem, keep, own, _, _) in enumerate(reqs)}
    if not chunked:
        budget = max(budget, max(len(p) for p in prompts.values()))
    capacity = max(len(p) + r[4] for p, r in zip(prompts.values(), reqs)) + spare
    engine = engine_with_cache(capacity, block, snapshots, max_batched_tokens=budget, chunked_prefill=chunked,
                               pipeline=pipeline)
    pending, cancels = sorted(enumerate(reqs), key=lambda x: x[1][0]), {}
    while pending or engine.has_unfinished():
        while pending and pending[0][1][0] <= engine.round_id:
            i, (_, _, _, _, max_new, cancel_after) = pending.pop(0)
            engine.submit(f"r{i}", prompts[f"r{i}"], SamplingParams(max_new_tokens=max_new))
            if cancel_after is not None:
                cancels[f"r{i}"] = engine.round_id + cancel_after
        engine.step()  # StatefulToy checks each plan: no shared slot written, state == cached tokens
        for rid, at in cancels.items():
            if at == engine.round_id:
                engine.cancel(rid)
        assert engine.round_id < 500, "no progress"
    for rid, req in engine.requests.items():
        assert req.error is None, req.error  # StatefulToy's checks raise inside the runner
        assert req.finished and req.slots_released
        if req.output_token_ids:
            assert req.output_token_ids[0] == prompts[rid][-1] + 1  # the toy's answer, cache or not
    cache = engine.prefix_cache
    assert not cache.holds
    assert engine.kv_pool.num_free + cache.cached_slots() == capacity  # the rest is in the index, not leaked
    engine.clear_prefix_cache()
    assert engine.kv_pool.num_free == capacity
    assert cache.snapshot_pool.num_free == snapshots and not cache.blocks
