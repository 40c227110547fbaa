"""Lesson 4's check: ``BatchEngine._chunk_size`` and ``Engine.plan_prefill``, chunked prefill, in the engine.

Scope: the A/B/C demo with the toy runner (``pipeline_demo --toy``) as the lesson runs it, and with the
chunking options changed (budgets of 5, 3 and 1, two requests at most, whole prompts only, cross-round); then
two scenarios on lesson 15's stateful toy, whose token depends on every token its "recurrent state" has seen:
long prompts cut under a budget of 6 with a state slot to spare, and prompts that start after a cached prefix.
Compared line by line with the engine's runs, then the lesson's invariants on the learner's runs: only the
last chunk of a prompt samples, the chunks cover it in order with no gap or overlap, each round within the
budget (a prompt whole without chunked prefill), the tokens equal a run with whole prompts, every slot back.
Non-scope: the order in which a round is filled (lesson 3 writes ``schedule``; here the engine's own runs),
tensors (the lesson's model tests compare chunked and whole logits of a Qwen3.5).
"""

from __future__ import annotations

from collections.abc import Callable

from mini_deepinfer import pipeline_demo

from ..exercise import Check
from ..words import Words
from .lesson_15 import IDLE, CacheRun, engine_stops, in_scenario, make_engine, play
from .toy_scenes import MAX_ROUNDS, Run, Stalled, committed_in_order, same_in, slots_returned


def abc_run(**options: object) -> Run:
    """The A/B/C demo on the toy runner (``pipeline_demo --toy`` with these options), as ``toy_scenes.abc``
    runs it, except that an exception of the engine's own code (a prompt done with no token sampled, a
    stall) ends the printed lines with a ``stopped`` line: the comparison names the round that went wrong."""
    run = Run()
    original_drive = pipeline_demo.drive

    def drive(engine, requests, after_step=lambda: None) -> None:
        run.engine = engine
        original_drive(engine, requests, lambda: (after_step(), _bounded(engine)))

    pipeline_demo.drive = drive
    try:
        with engine_stops(lambda why: run.lines.append(f"[round {_round(run)}] stopped  {why}")):
            demo_options = pipeline_demo.DemoOptions(toy=True, **options)
            pipeline_demo.run_demo(demo_options, print_line=run.lines.append)
    finally:
        pipeline_demo.drive = original_drive
    run.events = list(run.engine.trace.events)
    return run


def _round(run: Run) -> int:
    return run.engine.round_id if run.engine is not None else 0


def _bounded(engine) -> None:
    if engine.round_id >= MAX_ROUNDS:
        raise Stalled(f"the engine was still busy after {MAX_ROUNDS} rounds")


def demo() -> Run:
    return abc_run()


def budget_5() -> Run:
    return abc_run(max_batched_tokens=5)


def budget_3() -> Run:
    return abc_run(max_batched_tokens=3)


def budget_1() -> Run:
    return abc_run(max_batched_tokens=1)


def two_at_most() -> Run:
    return abc_run(max_num_seqs=2)


def whole_prompts() -> Run:
    return abc_run(chunked_prefill=False, max_batched_tokens=18)


def cross_round() -> Run:
    return abc_run(pipeline=True, max_batched_tokens=6)


LONG = [list(range(1, 14)), list(range(30, 37)), list(range(60, 80))]


def long_prompts(chunked: bool = True) -> CacheRun:
    """Prompts of 13, 7 and 20 tokens under a budget of 6, two at a time (a third state slot is free), the
    third arriving while the others are cut."""
    engine = make_engine(False, max_num_seqs=2, state_capacity=3, max_batched_tokens=6 if chunked else 20,
                         chunked_prefill=chunked)
    return play(engine, [("L0", LONG[0], 3), ("L1", LONG[1], 4), 1, ("L2", LONG[2], 2)])


SHARED = [list(range(100, 111)), list(range(100, 109)) + [7, 8, 9], list(range(100, 111)) + [5]]


def after_a_cached_prefix(chunked: bool = True) -> CacheRun:
    """Prefix cache on, blocks of 4, budget 4: the later prompts start after the 8 and 10 tokens they
    reuse."""
    engine = make_engine(True, max_batched_tokens=4 if chunked else 12, chunked_prefill=chunked)
    return play(engine, [item for i, prompt in enumerate(SHARED) for item in ((f"S{i}", prompt, 2), IDLE)])


ABC = (demo, budget_5, budget_3, budget_1, two_at_most, whole_prompts, cross_round)
STATEFUL = (long_prompts, after_a_cached_prefix)
SCENARIOS: tuple[Callable[[], Run], ...] = ABC + STATEFUL


def _prefills(run: Run) -> dict[str, list]:
    """Each request's prefill chunks (schedule events), in order."""
    chunks: dict[str, list] = {}
    for event in run.events:
        if event.kind == "schedule" and event.data["phase"] == "prefill":
            chunks.setdefault(event.request_id, []).append(event)
    return chunks


EARLY = Words("{request} sampled a token from its chunk of round {round}, which does not end the prompt",
              "{request} 在第 {round} 轮的块并没有结束 prompt，却采样了一个 token")
NEVER = Words("{request}'s last chunk (round {round}) sampled no token",
              "{request} 的最后一块（第 {round} 轮）没有采样 token")


def only_last_samples(trial) -> Words | None:
    """Tokens come (committed or discarded, by the round that sampled them) from a prompt's last chunk, never
    from an earlier one."""
    for scenario in SCENARIOS:
        run = trial.learner(scenario)
        sampled = {(e.request_id, e.data.get("round")) for e in run.events if e.kind in ("commit", "discard")}
        for rid, chunks in _prefills(run).items():
            early = [e.round_id for e in chunks[:-1] if (rid, e.round_id) in sampled]
            if early:
                return in_scenario(scenario.__name__, EARLY.format(request=rid, round=early[0]))
            if (rid, chunks[-1].round_id) not in sampled:
                return in_scenario(scenario.__name__, NEVER.format(request=rid, round=chunks[-1].round_id))
    return None


GAP = Words("{request}'s chunk in round {round} starts at position {start}; the prompt tokens before it end "
            "at {expected}", "{request} 在第 {round} 轮的块从位置 {start} 开始，而它前面的 prompt token "
            "到 {expected} 为止")
WRONG_TOKENS = Words("{request}'s chunk in round {round} at positions from {start} holds {got}; the prompt "
                     "has {want} there", "{request} 在第 {round} 轮从位置 {start} 起的块是 {got}，"
                     "而 prompt 在那里是 {want}")
SHORT = Words("{request}'s chunks end at position {end}; its prompt has {length} tokens",
              "{request} 的各块到位置 {end} 为止；它的 prompt 有 {length} 个 token")


def chunks_cover(trial) -> Words | None:
    """Each prompt's chunks start after its cached prefix, follow one another, hold its tokens, reach its
    end."""
    for scenario in SCENARIOS:
        run = trial.learner(scenario)
        for rid, chunks in _prefills(run).items():
            broken = _gap(run.engine.requests[rid], chunks)
            if broken is not None:
                return in_scenario(scenario.__name__, broken)
    return None


def _gap(req, chunks: list) -> Words | None:
    end = req.cached_prompt_tokens
    for event in chunks:
        start, inputs = event.data["start_pos"], list(event.data["inputs"])
        if start != end:
            return GAP.format(request=req.request_id, round=event.round_id, start=start, expected=end)
        want = list(req.prompt_token_ids[start : start + len(inputs)])
        if inputs != want:
            return WRONG_TOKENS.format(request=req.request_id, round=event.round_id, start=start, got=inputs,
                                       want=want)
        end = start + len(inputs)
    if end != req.prompt_len:
        return SHORT.format(request=req.request_id, end=end, length=req.prompt_len)
    return None


OVER = Words("round {round} computes {tokens} tokens for {seqs} requests; the budget is {budget} tokens and "
             "{max_seqs} requests", "第 {round} 轮为 {seqs} 条请求计算了 {tokens} 个 token；预算是 {budget} "
             "个 token、{max_seqs} 条请求")
CUT = Words("{request}'s prompt is cut into {count} chunks without chunked prefill",
            "没有开分块 prefill，{request} 的 prompt 却被切成了 {count} 块")


def within_budget(trial) -> Words | None:
    """No round computes more than the budget or runs more than max_num_seqs requests; without chunked
    prefill every prompt runs in one piece."""
    for scenario in SCENARIOS:
        run = trial.learner(scenario)
        config, rounds = run.engine.config, {}
        for event in run.events:
            if event.kind == "schedule":
                rounds.setdefault(event.round_id, []).append(len(event.data["inputs"]))
        for round_id, sizes in rounds.items():
            if sum(sizes) > config.max_batched_tokens or len(sizes) > config.max_num_seqs:
                return in_scenario(scenario.__name__, OVER.format(
                    round=round_id, tokens=sum(sizes), seqs=len(sizes), budget=config.max_batched_tokens,
                    max_seqs=config.max_num_seqs))
        for rid, chunks in _prefills(run).items():
            if not config.chunked_prefill and len(chunks) > 1:
                return in_scenario(scenario.__name__, CUT.format(request=rid, count=len(chunks)))
    return None


UNLIKE_WHOLE = Words("{request} gets {got} with its prompt in chunks, {want} with it whole",
                     "{request} 分块时得到 {got}，整段 prefill 时得到 {want}")


def same_tokens_as_whole(trial) -> Words | None:
    """Each request's output equals the engine's with whole prompts (the A/B/C demo without chunking)."""
    for scenario in SCENARIOS:
        whole = trial.engine(scenario, False) if scenario in STATEFUL else trial.engine(whole_prompts)
        got = trial.learner(scenario).engine.requests
        for rid, req in whole.engine.requests.items():
            mine = got[rid].output_token_ids if rid in got else None
            if mine != req.output_token_ids:
                return in_scenario(scenario.__name__, UNLIKE_WHOLE.format(request=rid, got=mine,
                                                                          want=req.output_token_ids))
    return None


def every_slot_returned(trial) -> Words | None:
    for scenario in SCENARIOS:
        run = trial.learner(scenario)
        broken = slots_returned(run) or committed_in_order(run)
        if broken is None and isinstance(run, CacheRun) and run.leaks:
            broken = run.leaks[0]
        if broken is not None:
            return in_scenario(scenario.__name__, broken)
    return None


CHECKS = (
    Check(Words("the A/B/C rounds (six variants) and two stateful runs equal the engine's, line by line",
                "A/B/C 的每一轮（六个变体）和两个带状态的运行与引擎逐行一致"), same_in(SCENARIOS)),
    Check(Words("only the chunk that ends a prompt samples a token", "只有结束 prompt 的那一块才采样"),
          only_last_samples, "plan"),
    Check(Words("each prompt's chunks cover it in order, with no gap and no overlap",
                "每个 prompt 的各块按顺序覆盖整个 prompt，不重不漏"), chunks_cover, "plan"),
    Check(Words("no round over the budget or max_num_seqs; without chunked prefill a prompt runs whole",
                "没有一轮超出预算或 max_num_seqs；不开分块时 prompt 整段运行"), within_budget),
    Check(Words("every request's tokens equal those of a run with whole prompts",
                "每条请求的 token 与整段 prefill 的运行相同"), same_tokens_as_whole, "state"),
    Check(Words("tokens committed in order, and every KV and state slot returned at the end",
                "token 按顺序提交，结束时所有 KV 与状态槽位都已归还"), every_slot_returned),
)
