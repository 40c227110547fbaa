"""The core lessons' scenarios on the toy runner, and the comparisons and invariants they share.

Scope: running the lessons' own demos (lesson 1's two requests, ``python -m mini_deepinfer``; the A/B/C
requests of lessons 3 and 4, ``pipeline_demo --toy``) and small scenarios of the same kind, keeping every
printed line, trace event and the engine at the end (:class:`Run`); :func:`first_difference` (the first line
where the learner's run leaves the engine's, with its round); invariants every engine lesson holds (slots
returned, tokens committed in order and once, the toy cache holding prompt + output). Standard library only:
the page runs these. Non-scope: which scenario a lesson runs (its ``lesson_NN.py``).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from weakref import WeakKeyDictionary

from mini_deepinfer import pipeline_demo
from mini_deepinfer.__main__ import run_demo as lesson1_demo
from mini_deepinfer.core.commit import Delivery
from mini_deepinfer.core.engine import Engine
from mini_deepinfer.core.plan import RoundPlan
from mini_deepinfer.core.speculative import SpeculativeResult, Verified
from mini_deepinfer.core.toy import ToyLaunch, ToyRunner
from mini_deepinfer.core.trace import TraceEvent, format_event

from ..checking import TookTooLong
from ..words import Words

_PACKAGE = Path(__file__).resolve().parents[2]  # mini_deepinfer/
MAX_ROUNDS = 200  # every scenario here ends within 40 rounds; a schedule that stalls stops here


@dataclass
class Run:
    """One scenario's run: the lines its demo printed, the engine's trace events, the engine at the end."""

    lines: list[str] = field(default_factory=list)
    events: list[TraceEvent] = field(default_factory=list)
    engine: Engine | None = None

    @property
    def event_lines(self) -> list[str]:
        return [format_event(event) for event in self.events]


class Stalled(RuntimeError):
    """The scenario ran ``MAX_ROUNDS`` rounds without finishing."""


_STEPS: WeakKeyDictionary = WeakKeyDictionary()  # steps taken by each engine (a round number may not move)


def _bounded(engine: Engine) -> None:
    _STEPS[engine] = _STEPS.get(engine, 0) + 1
    if engine.round_id >= MAX_ROUNDS or _STEPS[engine] >= MAX_ROUNDS:
        raise Stalled(f"the engine was still busy after {MAX_ROUNDS} rounds")


def stopped_by_engine(exc: BaseException) -> bool:
    """True when the run ended in the package's own code alone (a stall, or the engine tripping over a state
    the learner's function left): every frame of the traceback is in ``mini_deepinfer``. Such a run is kept
    and compared up to that point; an exception raised with the learner's code on the stack is theirs."""
    if isinstance(exc, TookTooLong):
        return False
    return all(_PACKAGE in Path(frame.f_code.co_filename).resolve().parents
               for frame, _ in traceback.walk_tb(exc.__traceback__))


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, Stalled) else f"{type(exc).__name__}: {exc}"


class _BoundedEngine(Engine):
    """``Engine`` as lesson 1's demo makes it, stopped by :func:`_bounded` when its loop never ends."""

    def step(self) -> list[Delivery]:
        delivered = super().step()
        _bounded(self)
        return delivered


def lesson1(slots: int = 8, cancel: str | None = None, after: int = 1, pipeline: bool = False) -> Run:
    """Lesson 1's demo (``python -m mini_deepinfer``), as its flags would run it (a ``stopped`` line last if
    it stalls or the engine's own code raises)."""
    run = Run()
    args = argparse.Namespace(slots=slots, cancel=cancel, cancel_after_round=after, pipeline=pipeline)
    demo_module, made = sys.modules[lesson1_demo.__module__], []
    demo_module.Engine = lambda *args, **kwargs: made.append(_BoundedEngine(*args, **kwargs)) or made[-1]
    try:
        run.engine = lesson1_demo(args, print_line=run.lines.append)
    except Exception as exc:  # noqa: BLE001 - the lines so far, then where the engine stopped
        if not stopped_by_engine(exc):
            raise
        run.engine = made[-1]
        run.lines.append(f"[round {run.engine.round_id}] stopped  {_why(exc)}")
    finally:
        demo_module.Engine = Engine
    run.events = list(run.engine.trace.events)
    return run


def abc(**options: object) -> Run:
    """The A/B/C demo of lessons 3 and 4 on the toy runner (``pipeline_demo --toy`` with these options); a
    ``stopped`` line last if it stalls or the engine's own code raises."""
    run = Run()
    demo_options = pipeline_demo.DemoOptions(toy=True, **options)
    original_drive = pipeline_demo.drive

    def drive(engine, requests, after_step=lambda: None) -> None:
        run.engine = engine
        original_drive(engine, requests, lambda: (after_step(), _bounded(engine)))

    pipeline_demo.drive = drive
    try:
        run.engine = pipeline_demo.run_demo(demo_options, print_line=run.lines.append)
    except Exception as exc:  # noqa: BLE001 - the lines so far, then where the engine stopped
        if not stopped_by_engine(exc) or run.engine is None:
            raise
        run.lines.append(f"[round {run.engine.round_id}] stopped  {_why(exc)}")
    finally:
        pipeline_demo.drive = original_drive
    run.events = list(run.engine.trace.events)
    return run


def drive(engine: Engine, arrivals: dict[int, list[tuple[str, list[int], object]]],
          during: Callable[[Engine], None] = lambda engine: None) -> Run:
    """Submit each request after its round (``arrivals[round]``), step until done; returns the run."""
    pending = dict(arrivals)
    while pending or engine.has_unfinished():
        for request_id, prompt, params in pending.pop(engine.round_id, []):
            engine.submit(request_id, prompt, params)
        engine.step()
        during(engine)
        _bounded(engine)
    return Run(events=list(engine.trace.events), engine=engine)


DIFFERS = Words("round {round}: the engine's run says\n    {expected}\nyours says\n    {actual}",
                "第 {round} 轮：引擎的运行是\n    {expected}\n你的运行是\n    {actual}")
SHORTER = Words("yours stops after {count} lines; the engine's goes on with\n    {expected}",
                "你的运行在第 {count} 行之后就结束了；引擎的还有\n    {expected}")
LONGER = Words("yours goes on after the engine's last line with\n    {actual}",
               "引擎的运行已经结束，你的还在继续：\n    {actual}")


def _round_of(line: str) -> str:
    return line.split("]", 1)[0].removeprefix("[round ").strip() if line.startswith("[round ") else "?"


def first_difference(expected: list[str], actual: list[str]) -> Words | None:
    """None if the two runs printed the same lines; else the first line where they part."""
    for index, (want, got) in enumerate(zip(expected, actual)):
        if want != got:
            return DIFFERS.format(round=_round_of(want), expected=want, actual=got)
    if len(actual) < len(expected):
        return SHORTER.format(count=len(actual), expected=expected[len(actual)])
    if len(actual) > len(expected):
        return LONGER.format(actual=actual[len(expected)])
    return None


def same_in(scenarios: tuple[Callable[[], Run], ...]) -> Callable:
    """A comparison step: each scenario's printed lines (its trace lines where it prints none) with the
    learner's functions equal the engine's, line by line; the first difference names its scenario."""
    def compare(trial) -> Words | None:
        for scenario in scenarios:
            want, got = trial.engine(scenario), trial.learner(scenario)
            differs = first_difference(want.lines or want.event_lines, got.lines or got.event_lines)
            if differs is not None:
                name = scenario.__name__
                return Words(f"scenario {name}: {differs.en}", f"场景 {name}：{differs.zh}")
        return None
    return compare


NOT_RETURNED = Words("{pool}: {free} of {capacity} slots free after every request finished (a slot was "
                     "never given back)",
                     "{pool}：所有请求结束后只有 {free}/{capacity} 个槽位空闲（有槽位没有归还）")


def slots_returned(run: Run) -> Words | None:
    """With nothing running, every KV and state slot is free again."""
    for pool in (run.engine.kv_pool, run.engine.state_pool):
        if pool is not None and pool.num_free != pool.capacity:
            return NOT_RETURNED.format(pool=pool.name, free=pool.num_free, capacity=pool.capacity)
    return None


OUT_OF_ORDER = Words("{request}: the commit events add up to {committed}, but the output is {output}",
                     "{request}：commit 事件合起来是 {committed}，而输出是 {output}")
AFTER_STOP = Words("{request}: a token was committed after it finished ({reason})",
                   "{request}：结束（{reason}）之后又提交了 token")


def committed_in_order(run: Run) -> Words | None:
    """Each request's commit events, in order, add up to its output; none comes after its finish."""
    committed: dict[str, list[int]] = {}
    finished: dict[str, str] = {}
    for event in run.events:
        if event.kind == "commit":
            if event.request_id in finished:
                return AFTER_STOP.format(request=event.request_id, reason=finished[event.request_id])
            committed.setdefault(event.request_id, []).extend(event.data["tokens"])
        elif event.kind == "finish":
            finished[event.request_id] = event.data["reason"]
    for request_id, req in run.engine.requests.items():
        if committed.get(request_id, []) != list(req.output_token_ids):
            return OUT_OF_ORDER.format(request=request_id, committed=committed.get(request_id, []),
                                       output=list(req.output_token_ids))
    return None


# Lessons 1, 2, 10 and 11: runs driven step by step, a drafting toy, and the release invariants they share.

@dataclass(frozen=True)
class Held:
    """One request's bookkeeping after a step: what lessons 1, 2 and 11 hold it to."""

    finished: bool
    rounds_in_flight: int
    holds_slots: bool
    first_token_at: float | None
    cache: tuple[int, ...]  # the toy cache's tokens in the request's KV slots
    committed: tuple[int, ...]  # prompt + output[:-1]: what the cache holds while the request decodes
    decoding: bool  # running, its prompt computed, an output committed, no round in flight


@dataclass
class Stepped(Run):
    """A run driven one ``step()`` at a time: what each step delivered, and every request after it."""

    deliveries: list[tuple[int, list]] = field(default_factory=list)  # (round, what step() returned)
    after: list[tuple[int, dict[str, Held]]] = field(default_factory=list)


def _held(engine: Engine) -> dict[str, Held]:
    held = {}
    for rid, req in engine.requests.items():
        cache = tuple(engine.runner.cache.get(slot, -1) for slot in req.kv_slots)
        committed = tuple(req.prompt_token_ids) + tuple(req.output_token_ids[:-1])
        idle = not (req.finished or req.rounds_in_flight)
        decoding = idle and req.prefill_done and bool(req.output_token_ids)
        held[rid] = Held(req.finished, req.rounds_in_flight, bool(req.kv_slots) or req.state_slot is not None,
                         req.first_token_at, cache, committed, decoding)
    return held


def stepped(engine: Engine, arrivals: dict[int, list[tuple[str, list[int], object]]],
            cancels: dict[int, list[str]] | None = None, ask_again: bool = False) -> Stepped:
    """Like :func:`drive`, keeping what each step returned; ``cancels[round]``: cancelled after that round;
    ``ask_again``: after every step, ``release_if_idle`` is called once more for each finished request. A
    run that stalls (``MAX_ROUNDS`` steps) or where the engine's own code raises ends with a ``stopped``
    event."""
    run, pending, cancels = Stepped(engine=engine), dict(arrivals), cancels or {}
    try:
        for _ in range(MAX_ROUNDS):
            if not (pending or engine.has_unfinished()):
                run.events = list(engine.trace.events)
                return run
            for request_id, prompt, params in pending.pop(engine.round_id, []):
                engine.submit(request_id, prompt, params)
            run.deliveries.append((engine.round_id + 1, engine.step()))
            for request_id in cancels.get(engine.round_id, []):
                engine.cancel(request_id)
            for req in list(engine.requests.values()) if ask_again else ():
                if req.finished:
                    engine.release_if_idle(req)
            run.after.append((engine.round_id, _held(engine)))
        raise Stalled(f"the engine was still busy after {MAX_ROUNDS} steps")
    except Exception as exc:  # noqa: BLE001 - the events so far, then where the engine stopped
        if not stopped_by_engine(exc):
            raise
        run.events = [*engine.trace.events, TraceEvent(engine.round_id, "stopped", None, {"why": _why(exc)})]
        return run


class ToyDrafter(ToyRunner):
    """The toy runner as a drafting runner (lesson 12's protocol, no model): the target says "last + 1"; the
    draft agrees except at every position divisible by ``miss``, where it says "last + 2", so a round commits
    a group of 1 to width + 1 tokens. The toy cache is per slot, so ``rewind`` has nothing to undo. It keeps
    every token it hands back (``handed[(round, request)]``), plain rounds' too, and each request it was told
    to forget (``released``)."""

    miss = 4

    def __init__(self) -> None:
        super().__init__()
        self.handed: dict[tuple[int, str], list[int]] = {}
        self.released: list[str] = []

    def release(self, request_id: str) -> None:
        self.released.append(request_id)
        super().release(request_id)

    def launch(self, plan: RoundPlan) -> ToyLaunch:
        wide = [seq for seq in plan.seqs if getattr(seq, "spec_width", 0)]
        result = SpeculativeResult(plan.round_id)
        plain = super().launch(replace(plan, seqs=tuple(s for s in plan.seqs if s not in wide))).result
        result.tokens.update(plain.tokens)
        for seq in wide:
            inputs = [seq.token_ids[0]]
            for position in range(seq.start_pos + 1, seq.start_pos + 1 + seq.spec_width):
                inputs.append(inputs[-1] + (2 if position % self.miss == 0 else 1))
            self._write_cache(replace(seq, token_ids=tuple(inputs)), inputs)
            accepted = 0
            while accepted < seq.spec_width and inputs[accepted + 1] == inputs[accepted] + 1:
                accepted += 1
            result.tokens[seq.request_id] = inputs[1 : accepted + 1] + [inputs[accepted] + 1]
            result.verified[seq.request_id] = Verified(inputs[1:], accepted, "toy")
            self.last_sampled[seq.request_id] = result.tokens[seq.request_id][-1]
        self.handed.update({(plan.round_id, rid): list(tokens) for rid, tokens in result.tokens.items()})
        return ToyLaunch(result)

    def rewind(self, request_id: str, length: int) -> None:
        """Nothing to undo: a rejected position's slot goes back to the pool, and is written before read."""


def in_flight_at(events: list[TraceEvent]) -> Iterator[tuple[TraceEvent, dict[int, list[str]]]]:
    """Each event, with the rounds launched and not read yet at that point (each with its requests): at a
    runner failure (``error``) the rounds it abandons, after it none."""
    unread: dict[int, list[str]] = {}
    for event in events:
        if event.kind == "launch":
            unread[event.data["round"]] = list(event.data["requests"])
        elif event.kind == "read":
            unread.pop(event.data["round"], None)
        yield event, unread
        if event.kind == "error":
            unread.clear()


FREED_IN_FLIGHT = Words("round {round}: {request}'s slots {slots} were given back while round {launched}, "
                        "launched and not read yet, still uses them",
                        "第 {round} 轮：{request} 的槽位 {slots} 被归还了，"
                        "而已发出、尚未读回的第 {launched} 轮还在用它们")


def freed_only_when_idle(run: Run) -> Words | None:
    """No request's slots come back while a launched, unread round still reads or writes them."""
    for event, unread in in_flight_at(run.events):
        if event.kind != "free":
            continue
        for launched, requests in unread.items():
            if event.request_id in requests:
                return FREED_IN_FLIGHT.format(round=event.round_id, request=event.request_id,
                                              slots=event.data["slots"], launched=launched)
    return None


KEPT = Words("after round {round}, {request} has finished and no launched round uses it, yet it still holds "
             "its slots", "第 {round} 轮之后，{request} 已经结束，也没有已发出的轮次在用它，却仍占着槽位")


def released_when_idle(run: Stepped) -> Words | None:
    """A finished request with no round in flight holds no slot at the end of the step."""
    for round_id, held in run.after:
        for rid, state in held.items():
            if state.finished and state.rounds_in_flight == 0 and state.holds_slots:
                return KEPT.format(round=round_id, request=rid)
    return None


PAST_STOP = Words("{request}: output {output} goes on after token {index} ({token}), which meets {reason}",
                  "{request}：输出 {output} 在第 {index} 个 token（{token}）之后还在继续，"
                  "而它已满足 {reason}")
WRONG_REASON = Words("{request}: output {output} finished as {got}; the stop check says {want}",
                     "{request}：输出 {output} 的结束原因是 {got}；停止检查给出的是 {want}")


def _rule(params, output: list[int], index: int) -> str | None:
    """The stop rule after ``output[index]`` is committed: eos first (unless ignore_eos), then length."""
    if not params.ignore_eos and output[index] in params.eos_token_ids:
        return "eos"
    return "length" if index + 1 >= params.max_new_tokens else None


def stops_at_first(run: Run) -> Words | None:
    """Each output ends at its first token that meets a stop, with that reason (or was cancelled before)."""
    for rid, req in run.engine.requests.items():
        output, got = list(req.output_token_ids), getattr(req.finish_reason, "value", req.finish_reason)
        for index in range(len(output)):
            reason = _rule(req.params, output, index)
            if reason is not None and index + 1 < len(output):
                return PAST_STOP.format(request=rid, output=output, index=index + 1, token=output[index],
                                        reason=reason)
        want = _rule(req.params, output, len(output) - 1) if output else None
        if req.params.max_new_tokens == 0:
            want = "length"
        if want != got and not (want is None and got in ("cancelled", "error")):
            return WRONG_REASON.format(request=rid, output=output, got=got, want=want or "running")
    return None


UNACCOUNTED = Words("{request}: round {round} handed back {handed}; the trace commits {committed} and "
                    "discards {discarded} of them (each token is either committed or discarded, once)",
                    "{request}：第 {round} 轮交回了 {handed}；trace 里提交了 {committed}、丢弃了 {discarded}"
                    "（每个 token 要么提交、要么丢弃，且只一次）")


def every_token_accounted(run: Run) -> Words | None:
    """Each token a read round handed back (``ToyDrafter.handed``) is committed or discarded, once."""
    read = {event.data["round"] for event in run.events if event.kind == "read"}
    for (round_id, rid), handed in run.engine.runner.handed.items():
        if round_id not in read:
            continue
        mine = [e for e in run.events if e.request_id == rid and e.data.get("round", e.round_id) == round_id]
        committed = [t for e in mine if e.kind == "commit" for t in e.data["tokens"]]
        discarded = [t for e in mine if e.kind == "discard" for t in e.data["tokens"]]
        if committed + discarded != handed:
            return UNACCOUNTED.format(request=rid, round=round_id, handed=handed, committed=committed,
                                      discarded=discarded)
    return None


TOLD = Words("the runner was told to forget {request} {times} times (release_if_idle tells it once, when the "
             "request's slots come back)",
             "runner 被告知忘掉 {request} 共 {times} 次（release_if_idle 只在请求的槽位归还时告诉它一次）")


def runner_told_once(run: Run) -> Words | None:
    """Once every request has finished, the toy runner (``ToyDrafter``) was told to forget each of them
    exactly once."""
    for rid in run.engine.requests:
        times = run.engine.runner.released.count(rid)
        if times != 1:
            return TOLD.format(request=rid, times=times)
    return None


DELIVERED = Words("round {round}: step() delivered {got}; the round committed {want}",
                  "第 {round} 轮：step() 交付的是 {got}；这一轮提交的是 {want}")
ENDS = ("eos", "length", "error")  # the reasons step() delivers (a cancel comes between steps)


def _committed(run: Run, round_id: int) -> dict[str, tuple]:
    """What each request committed in a round's step, and the reason that step finished it with."""
    want: dict[str, tuple] = {}
    for event in run.events:
        if event.round_id == round_id and event.kind == "commit":
            want[event.request_id] = (tuple(event.data["tokens"]), None)
        elif event.round_id == round_id and event.kind == "finish" and event.data["reason"] in ENDS:
            want[event.request_id] = (want.get(event.request_id, ((), None))[0], event.data["reason"])
    return want


def _by_request(delivered: object) -> dict[str, tuple] | str:
    """What step() returned, per request (tokens, finish reason); as text when it is not Delivery objects."""
    if not isinstance(delivered, list) or not all(isinstance(d, Delivery) for d in delivered):
        return repr(delivered)
    return {d.request_id: (tuple(d.tokens) if isinstance(d.tokens, (list, tuple)) else d.tokens,
                           getattr(d.finish_reason, "value", d.finish_reason)) for d in delivered}


def delivered_as_committed(run: Stepped) -> Words | None:
    """What each ``step()`` returned equals what its round committed (and the finish it caused)."""
    for round_id, delivered in run.deliveries:
        got, want = _by_request(delivered), _committed(run, round_id)
        if got != want:
            return DELIVERED.format(round=round_id, got=got, want=want)
    return None
