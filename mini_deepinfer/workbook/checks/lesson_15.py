"""Lesson 15's check: ``PrefixCache.match`` and ``PrefixCache.insert``, the prefix cache's index, in the
engine.

Scope: the lesson's run (two prompts that share their first 10 tokens, blocks of 4, the second arriving a
round later) and six more scenarios of the same kind through the real ``BatchEngine`` (one through the plain
``Engine``) with ``config.prefix_cache`` on: whole blocks and tails of every length, a prompt computed twice
at once, chunked cross-round prefill that indexes a prompt chunk by chunk, too few snapshot slots, eviction.
They run on :class:`StatefulToy`, lesson 1's toy runner with a toy "recurrent state" (the tokens it has
seen) and snapshot slots that copy it, so that a restore from a snapshot nobody saved shows, torch-free. The
first step compares the traces, each request's hit, what ``match`` finds for probe prompts and the index
itself with the engine's runs; then the lesson's invariants: no state reused that was not saved, tokens
equal with and without the prefix cache, every KV slot and snapshot slot back in its pool after
``clear_prefix_cache``. Lesson 4's check runs scenarios of its own on the same toy (:func:`make_engine`,
:func:`play`, :func:`engine_stops`).
Non-scope: eviction and release (the engine's own functions run), tensors and real snapshots (the model
tests), speculative decoding with a prefix cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.engine import Engine
from mini_deepinfer.core.plan import RoundPlan, RoundResult, SeqPlan
from mini_deepinfer.core.prefix_cache import PrefixCache
from mini_deepinfer.core.request import Request, SamplingParams
from mini_deepinfer.core.slots import SlotPool
from mini_deepinfer.core.toy import ToyLaunch, ToyRunner

from ..checking import TookTooLong
from ..exercise import Check
from ..words import Words
from .toy_scenes import MAX_ROUNDS, Run, Stalled, first_difference

PACKAGE_DIR = Path(__file__).resolve().parents[2]

VOCAB = 1000  # the toy's tokens are sums modulo this

SHARED_WRITE = Words("round {round}: {request} writes KV slot {slot}, which the prefix cache shares (a "
                     "cached slot is never written again)",
                     "第 {round} 轮：{request} 写入了前缀缓存共享的 KV 槽位 {slot}"
                     "（缓存中的槽位不能再被写）")
UNSAVED = Words("round {round}: {request} starts at position {start} from snapshot slot {slot}, into which "
                "nothing was saved", "第 {round} 轮：{request} 从快照槽位 {slot} 开始算位置 {start}，"
                "而这个槽位里没有保存过任何状态")
WRONG_STATE = Words("round {round}: {request} starts at position {start} from a state that has seen {seen} "
                    "tokens, ending {tail}; its cache holds {start} tokens, ending {want} (a reused prefix "
                    "needs the state saved at its end)",
                    "第 {round} 轮：{request} 从位置 {start} 开始，但它的状态看过 {seen} 个 token，"
                    "结尾是 {tail}；它的缓存里有 {start} 个 token，结尾是 {want}"
                    "（复用的前缀需要在它末尾保存过的状态）")


class StatefulToy(ToyRunner):
    """Lesson 1's toy runner with a "recurrent state" per state slot: the tuple of tokens it has seen.

    A chunk that starts at position 0 starts from an empty state; one with ``restore`` from that snapshot
    slot's copy; any other continues its state slot, as Qwen3.5's Gated DeltaNet layers do. ``saves`` copy the
    state into snapshot slots. The sampled token is the sum of every token seen, modulo ``VOCAB``, so it
    depends on the whole prefix as a model's does (from the KV cache when ``stateful`` is False, like Qwen2).
    What a model would get silently wrong is written down in ``problems`` instead of raised (the engine would
    turn an exception into an ``error`` finish): a write into a shared KV slot, a restore from a snapshot slot
    nothing was saved into, a state that is not the tokens cached before the chunk.
    """

    def __init__(self, stateful: bool = True) -> None:
        super().__init__()
        self.stateful = stateful
        self.kv_pool: SlotPool | None = None  # the engine's, set once the engine is made
        self.states: dict[int | None, tuple[int, ...]] = {}
        self.snapshots: dict[int, tuple[int, ...]] = {}
        self.problems: list[Words] = []

    def launch(self, plan: RoundPlan) -> ToyLaunch:
        result = RoundResult(plan.round_id)
        for seq in plan.seqs:
            tokens = tuple(self._resolve(seq))
            context = tuple(self.cache.get(slot) for slot in seq.context_slots[: seq.start_pos])
            self._check_writes(plan.round_id, seq)
            self._write_cache(seq, list(tokens))
            seen = self._run_state(plan.round_id, seq, context, tokens) if self.stateful else context + tokens
            if seq.sample:
                token = sum(t or 0 for t in seen) % VOCAB
                result.tokens[seq.request_id] = [token]
                self.last_sampled[seq.request_id] = token
        self.launches += 1
        return ToyLaunch(result)

    def _check_writes(self, round_id: int, seq: SeqPlan) -> None:
        for slot in seq.new_slots:
            if self.kv_pool is not None and self.kv_pool.holders(slot) > 1:
                self.problems.append(SHARED_WRITE.format(round=round_id, request=seq.request_id, slot=slot))

    def _run_state(self, round_id: int, seq: SeqPlan, context: tuple, tokens: tuple) -> tuple:
        """Start the chunk's state, check it against the cache, run the tokens, keep the asked snapshots."""
        if seq.restore is not None:
            if seq.restore not in self.snapshots:
                self.problems.append(UNSAVED.format(round=round_id, request=seq.request_id,
                                                    start=seq.start_pos, slot=seq.restore))
            state = self.snapshots.get(seq.restore, ())
        else:
            state = () if seq.start_pos == 0 else self.states.get(seq.state_slot, ())
        if state != context:
            self.problems.append(WRONG_STATE.format(round=round_id, request=seq.request_id,
                                                    start=seq.start_pos, seen=len(state),
                                                    tail=list(state[-3:]), want=list(context[-3:])))
        saves = dict(seq.saves)
        for index, token in enumerate(tokens):
            state += (token,)
            if seq.start_pos + index + 1 in saves:
                self.snapshots[saves[seq.start_pos + index + 1]] = state
        self.states[seq.state_slot] = state
        return state


@dataclass
class CacheRun(Run):
    """A scenario's run, and what the prefix cache held at its end (before ``clear_prefix_cache``)."""

    hits: list[str] = field(default_factory=list)
    index: list[str] = field(default_factory=list)
    leaks: list[Words] = field(default_factory=list)
    problems: list[Words] = field(default_factory=list)


def make_engine(cached: bool, stateful: bool = True, plain: bool = False, **numbers: object) -> Engine:
    """A ``BatchEngine`` (``plain``: an ``Engine``) over a :class:`StatefulToy`; the prefix cache on if
    ``cached``; blocks of 4 and one snapshot slot per block the cache can hold unless ``numbers`` say."""
    runner = StatefulToy(stateful)
    values = {"kv_capacity": 64, "state_capacity": 8, "prefix_block": 4, **numbers}
    if stateful and "prefix_snapshots" not in values:
        values["prefix_snapshots"] = values["kv_capacity"] // values["prefix_block"] + 8
    if not stateful or not cached:
        values["prefix_snapshots"] = None
    engine = (Engine if plain else BatchEngine)(runner, EngineConfig(prefix_cache=cached, **values))
    runner.kv_pool = engine.kv_pool
    return engine


def finish_run(engine: Engine, prompts: list[list[int]]) -> CacheRun:
    """The run's record: trace, hits of each request and of probe prompts, the index, then clear the cache
    and keep what was still not free."""
    run = CacheRun(events=list(engine.trace.events), engine=engine)
    run.problems = list(engine.runner.problems)
    cache = engine.prefix_cache
    if cache is None:
        return run
    run.hits = [f"{rid}: {req.cached_prompt_tokens} prompt tokens cached"
                for rid, req in engine.requests.items()]
    run.hits += [probe_line(cache, probe) for prompt in prompts for probe in probes(prompt)]
    run.index = index_lines(cache)
    run.leaks = leaks(engine)
    return run


def probes(prompt: list[int]) -> list[list[int]]:
    """Prompts to ask ``match`` about once a scenario ends: the prompt, longer, shorter, and its start."""
    return [prompt, prompt + [VOCAB + 1], prompt[:-1], prompt[:5]]


def probe_line(cache: PrefixCache, tokens: list[int]) -> str:
    hit = cache.match(tokens)
    return f"match({tokens}) reuses {hit.length} tokens, blocks ending at {[b.end for b in hit.blocks]}"


def index_lines(cache: PrefixCache) -> list[str]:
    """The index as text: each block by the tokens of the prefix it ends, its slots, snapshot, children and
    its place in the least-recently-used order (1 = evicted first)."""
    ticks = sorted({block.last_used for block in cache.blocks.values()})
    lines = []
    for block in cache.blocks.values():
        prefix, parent = list(block.tokens), block.parent
        while parent in cache.by_id:
            prefix, parent = list(cache.by_id[parent].tokens) + prefix, cache.by_id[parent].parent
        lines.append((block.end, prefix, f"block ending at {block.end}, prefix {prefix}: KV slots "
                      f"{list(block.slots)}, snapshot {block.snapshot}, {block.children} children, LRU place "
                      f"{ticks.index(block.last_used) + 1}"))
    return [line for _, _, line in sorted(lines)]


HELD_ELSEWHERE = Words("before clear_prefix_cache: {free} KV slots free + {cached} held by the index = "
                       "{total}, not {capacity} (a slot was lost)",
                       "clear_prefix_cache 之前：空闲 {free} 个 KV 槽位 + 索引持有 {cached} 个 = {total}，"
                       "而不是 {capacity}（有槽位丢失了）")
NOT_BACK = Words("after clear_prefix_cache: {free} of {capacity} {pool} slots free",
                 "clear_prefix_cache 之后：{pool} 槽位只有 {free}/{capacity} 个空闲")
STILL_INDEXED = Words("after clear_prefix_cache: {count} blocks still in the index",
                      "clear_prefix_cache 之后：索引里还有 {count} 个块")


def leaks(engine: Engine) -> list[Words]:
    """After every request finished: what the pools miss, before and after ``clear_prefix_cache`` (the state
    slots are not the index's, but a scenario that ends holds none either)."""
    cache, kv, found = engine.prefix_cache, engine.kv_pool, []
    if kv.num_free + cache.cached_slots() != kv.capacity:
        found.append(HELD_ELSEWHERE.format(free=kv.num_free, cached=cache.cached_slots(),
                                           total=kv.num_free + cache.cached_slots(), capacity=kv.capacity))
    engine.clear_prefix_cache()
    for pool in (kv, cache.snapshot_pool, engine.state_pool):
        if pool is not None and pool.num_free != pool.capacity:
            found.append(NOT_BACK.format(free=pool.num_free, capacity=pool.capacity, pool=pool.name))
    if cache.blocks:
        found.append(STILL_INDEXED.format(count=len(cache.blocks)))
    return found


def submit(engine: Engine, rid: str, prompt: list[int], max_new: int = 2) -> None:
    engine.submit(rid, prompt, SamplingParams(max_new_tokens=max_new))


def run_until_idle(engine: Engine) -> None:
    while engine.has_unfinished():
        engine.step()
        if engine.round_id >= MAX_ROUNDS:
            raise Stalled(f"the engine was still busy after {MAX_ROUNDS} rounds")


def raised_by_engine(exc: BaseException) -> bool:
    """True when every frame of the traceback is the package's own code: the engine tripped over a state the
    learner's function left (a prompt done without a sampled token, a stall), not their code raising."""
    files = {Path(frame.f_code.co_filename).resolve() for frame, _ in _frames(exc)}
    return not isinstance(exc, TookTooLong) and all(PACKAGE_DIR in path.parents for path in files)


def _frames(exc: BaseException) -> Iterator:
    tb = exc.__traceback__
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


@contextmanager
def engine_stops(on_stop: Callable[[str], None]) -> Iterator[None]:
    """An exception the engine's own code raises ends the run: ``on_stop`` records why (as a trace event or a
    line), so the comparison names the first round where the run left the engine's, not only the exception.
    The learner's own exceptions pass (the check shows them with their file's frames)."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - re-raised unless the engine's own code raised it
        if not raised_by_engine(exc):
            raise
        on_stop(f"{type(exc).__name__}: {exc}")


IDLE = 0
"""In a scenario's script: step until every request so far has finished."""


def play(engine: Engine, script: list) -> CacheRun:
    """Run a script: ``(request id, prompt, max_new_tokens)`` submits, a number ``n`` steps ``n`` rounds,
    ``IDLE`` steps until nothing is left; then until nothing is left. Returns the run's record."""
    with engine_stops(lambda why: engine.trace.emit(engine.round_id, "stopped", None, why=why)):
        for item in script:
            if isinstance(item, tuple):
                submit(engine, *item)
            elif item == IDLE:
                run_until_idle(engine)
            for _ in range(item if isinstance(item, int) else 0):
                engine.step()
        run_until_idle(engine)
    return finish_run(engine, [list(item[1]) for item in script if isinstance(item, tuple)])


def one_by_one(prompts: list[list[int]], max_new: int = 2) -> list:
    """A script: each prompt arrives once the one before has finished."""
    return [step for index, prompt in enumerate(prompts) for step in ((f"r{index}", prompt, max_new), IDLE)]


# The lesson's two prompts (token ids of "The cache keeps every token of a prompt. Question one:" / "two:").
LESSON_PROMPTS = [[760, 6297, 13205, 1396, 3817, 314, 264, 9640, 13, 15380, 799, 25],
                  [760, 6297, 13205, 1396, 3817, 314, 264, 9640, 13, 15380, 1330, 25]]


def lesson_run(cached: bool = True) -> CacheRun:
    """The lesson's command: req-1 arrives after round 1, shares 10 tokens with req-0 and reuses 8."""
    return play(make_engine(cached), [("req-0", LESSON_PROMPTS[0], 2), 1, ("req-1", LESSON_PROMPTS[1], 2)])


STEM = list(range(10))
REUSE_PROMPTS = [STEM, STEM + [50, 51], list(range(6)) + [60, 61], STEM, [99, *STEM],
                 list(range(200, 205)), list(range(200, 205)) + [7], list(range(300, 307)),
                 list(range(300, 307)) + [1, 2], list(range(300, 306)) + [8], list(range(400, 402)),
                 list(range(400, 402)) + [3]]


def reuse_kinds(cached: bool = True) -> CacheRun:
    """One at a time: whole blocks, tails of 1, 2 and 3 tokens, a prompt that diverges inside a block, the
    same prompt again (one token is left to compute), a prompt that starts elsewhere."""
    return play(make_engine(cached), one_by_one(REUSE_PROMPTS))


def plain_engine(cached: bool = True) -> CacheRun:
    """The same prompts through the plain ``Engine`` (one request at a time), blocks of 3, no recurrent state
    (as Qwen2: no snapshots, every block end is a reuse point)."""
    return play(make_engine(cached, stateful=False, plain=True, prefix_block=3), one_by_one(REUSE_PROMPTS))


def twice_at_once(cached: bool = True) -> CacheRun:
    """Two requests compute the same prompt in the same round (the second's snapshots go back, the index
    has them); a third arrives while they decode and reuses 6 tokens."""
    prompt = list(range(20, 31))
    script = [("a", prompt, 2), ("b", prompt + [5], 2), 1, ("c", prompt[:7] + [9, 9], 2)]
    return play(make_engine(cached, prefix_block=3), script)


def chunk_by_chunk(cached: bool = True) -> CacheRun:
    """Budget 5, chunked, cross-round: a prompt is indexed as each chunk is read; a later request reuses what
    is indexed when it is admitted."""
    engine = make_engine(cached, max_batched_tokens=5, chunked_prefill=True, pipeline=True)
    prompts = [list(range(40, 57)), list(range(40, 51)) + [1], list(range(40, 57)) + [2, 3]]
    return play(engine, [item for i, prompt in enumerate(prompts) for item in ((f"q{i}", prompt, 3), 2)])


def few_snapshots(cached: bool = True) -> CacheRun:
    """Two snapshot slots for blocks of 4. P and Q are computed in the same round: P takes both slots, so Q's
    block ends have no snapshot and are no reuse point. Q again computes it all, evicting P for the slots,
    and its insert gives Q's blocks their snapshots; Q + one token then reuses 8 tokens."""
    p, q = list(range(8)), list(range(20, 28))
    script = [("p", p, 1), ("q", q, 1), IDLE, ("q-again", q, 2), IDLE, ("q-longer", q + [5], 2), IDLE,
              ("p-longer", p + [5], 2)]
    return play(make_engine(cached, prefix_snapshots=2), script)


def eviction(cached: bool = True) -> CacheRun:
    """24 KV slots: admitting a request evicts the least recently used blocks nobody holds."""
    a, b, c = list(range(60, 68)), list(range(70, 78)), list(range(80, 88))
    prompts = [a, b, a + [1], c, b + [2], a + [3], c + [4]]
    return play(make_engine(cached, kv_capacity=24, prefix_snapshots=10), one_by_one(prompts, max_new=1))


SCENARIOS: tuple[Callable[..., CacheRun], ...] = (lesson_run, reuse_kinds, plain_engine, twice_at_once,
                                                  chunk_by_chunk, few_snapshots, eviction)


def in_scenario(name: str, words: Words) -> Words:
    return Words(f"scenario {name}: {words.en}", f"场景 {name}：{words.zh}")


UNLIKE = Words("{what}: the engine's run has\n    {expected}\nyours has\n    {actual}",
               "{what_zh}：引擎的运行是\n    {expected}\n你的运行是\n    {actual}")
RECORDS = (("trace", "trace", lambda run: run.event_lines), ("hits", "命中", lambda run: run.hits),
           ("the index at the end", "结束时的索引", lambda run: run.index))


def same_as_engine(trial) -> Words | None:
    """Per scenario: the trace (with its round), then the hits and probes, then the index, as the engine's."""
    for scenario in SCENARIOS:
        want, got = trial.engine(scenario), trial.learner(scenario)
        for what, what_zh, lines in RECORDS:
            differs = first_difference(lines(want), lines(got))
            if differs is not None and lines is not RECORDS[0][2]:
                pairs = [(w, g) for w, g in zip(lines(want), lines(got)) if w != g]
                differs = UNLIKE.format(what=what, what_zh=what_zh, expected=pairs[0][0],
                                        actual=pairs[0][1]) if pairs else differs
            if differs is not None:
                return in_scenario(scenario.__name__, differs)
    return None


def no_unsaved_state(trial) -> Words | None:
    """The toy's state at the start of every chunk is the tokens in the request's cache before it."""
    for scenario in SCENARIOS:
        problems = trial.learner(scenario).problems
        if problems:
            return in_scenario(scenario.__name__, problems[0])
    return None


TOKENS_DIFFER = Words("{request} gets {got} with the prefix cache, {want} without it",
                      "{request} 开前缀缓存得到 {got}，不开得到 {want}")


def outcome(req: Request | None) -> str:
    """A request's output and how it ended, as the messages show it."""
    if req is None:
        return "nothing (never submitted)"
    return f"{list(req.output_token_ids)} ({req.finish_reason.value if req.finished else 'unfinished'})"


def same_tokens_without_cache(trial) -> Words | None:
    for scenario in SCENARIOS:
        want, got = trial.engine(scenario, False).engine.requests, trial.learner(scenario).engine.requests
        for rid, req in want.items():
            if outcome(got.get(rid)) != outcome(req):
                differs = TOKENS_DIFFER.format(request=rid, got=outcome(got.get(rid)), want=outcome(req))
                return in_scenario(scenario.__name__, differs)
    return None


def all_returned(trial) -> Words | None:
    for scenario in SCENARIOS:
        leaked = trial.learner(scenario).leaks
        if leaked:
            return in_scenario(scenario.__name__, leaked[0])
    return None


CHECKS = (
    Check(Words("the lesson's run and six more scenarios equal the engine's: trace, hits, the index",
                "本课的运行及另外六个场景与引擎一致：trace、命中、索引"), same_as_engine),
    Check(Words("no request starts from a state that was not saved at the end of its reused prefix",
                "没有请求从未在复用前缀末尾保存过的状态开始"), no_unsaved_state, "why"),
    Check(Words("every request's tokens equal those of the same run without the prefix cache",
                "每条请求的 token 与不开前缀缓存时相同"), same_tokens_without_cache, "admission"),
    Check(Words("every KV slot and snapshot slot is back in its pool after clear_prefix_cache",
                "clear_prefix_cache 之后所有 KV 槽位和快照槽位都回到了池中"), all_returned, "eviction"),
)
