"""Lesson 10's check: ``Engine.step``, one round, synchronous or cross-round (launch N+1, then read N).

Scope: the lesson's demo (``python -m mini_deepinfer --pipeline``) and lesson 1's synchronous one, the A/B/C
demo of lessons 3 and 4 on the toy runner (``pipeline_demo --toy``) both ways, a batch whose requests arrive
late enough to leave rounds with nothing to launch, and runner failures in a launch and in a read, both ways.
Compared line by line with the engine's, then the lesson's invariants on the learner's runs: cross-round
tokens equal to synchronous ones, every launched round read exactly once and in order (in its own step
synchronously; in the next step, after that step's launch, cross-round), what ``step()`` returns equal to
what the round committed, a runner failure finishing exactly the requests in flight as ``error`` while the
others get the tokens they get without it, every slot returned.
Non-scope: the commit and the release after a read (lessons 1, 2 and 11), the input in flight (``IN_FLIGHT``,
the runners).
"""

from __future__ import annotations

from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.core.toy import ToyLaunch

from ..exercise import Check
from ..words import Words
from .toy_scenes import (
    Run,
    Stepped,
    ToyDrafter,
    abc,
    delivered_as_committed,
    in_flight_at,
    lesson1,
    same_in,
    slots_returned,
    stepped,
)


class RunnerFault(RuntimeError):
    """The failure a :class:`FailingToy` raises."""


class FailingToy(ToyDrafter):
    """The toy runner, failing once: in its ``where`` (``launch`` or ``read``) call number ``at``."""

    def __init__(self, where: str, at: int) -> None:
        super().__init__()
        self.where, self.at, self.calls = where, at, {"launch": 0, "read": 0}

    def _count(self, name: str) -> None:
        self.calls[name] += 1
        if name == self.where and self.calls[name] == self.at:
            raise RunnerFault(f"the toy failed in {name} number {self.at}")

    def launch(self, plan) -> ToyLaunch:
        self._count("launch")
        return super().launch(plan)

    def read(self, handle: ToyLaunch):
        self._count("read")
        return super().read(handle)


ARRIVALS = {0: [("a", [1, 2, 3], SamplingParams(max_new_tokens=3)),
                ("b", [10], SamplingParams(max_new_tokens=4, eos_token_ids=(13,)))],
            1: [("c", [20, 21, 22, 23, 24], SamplingParams(max_new_tokens=2))],
            7: [("d", [30], SamplingParams(max_new_tokens=2))]}


def _batch(pipeline: bool, runner: ToyDrafter | None = None) -> Stepped:
    config = EngineConfig(kv_capacity=32, state_capacity=3, max_num_seqs=3, max_batched_tokens=4,
                          chunked_prefill=True, pipeline=pipeline)
    return stepped(BatchEngine(runner or ToyDrafter(), config), ARRIVALS)


def demo() -> Run:
    return lesson1()


def demo_pipeline() -> Run:
    return lesson1(pipeline=True)


def abc_sync() -> Run:
    return abc()


def abc_pipeline() -> Run:
    return abc(pipeline=True)


def late() -> Stepped:
    """Four requests, one arriving after the others have finished (steps with nothing to launch)."""
    return _batch(pipeline=False)


def late_pipeline() -> Stepped:
    return _batch(pipeline=True)


def read_fails() -> Stepped:
    """The third read raises: what that round held is abandoned."""
    return _batch(False, FailingToy("read", 3))


def read_fails_pipeline() -> Stepped:
    return _batch(True, FailingToy("read", 3))


def launch_fails() -> Stepped:
    """The fourth launch raises, with a round in flight cross-round."""
    return _batch(False, FailingToy("launch", 4))


def launch_fails_pipeline() -> Stepped:
    return _batch(True, FailingToy("launch", 4))


FAULTS = (read_fails, read_fails_pipeline, launch_fails, launch_fails_pipeline)
SCENARIOS = (demo, demo_pipeline, abc_sync, abc_pipeline, late, late_pipeline, *FAULTS)
PAIRS = ((demo, demo_pipeline), (abc_sync, abc_pipeline), (late, late_pipeline))


def _outputs(run: Run) -> dict[str, tuple]:
    return {rid: (list(req.output_token_ids), getattr(req.finish_reason, "value", None))
            for rid, req in run.engine.requests.items()}


NOT_SYNC = Words("{request}: cross-round ({scenario}) gives {crossed}; synchronously it is {sync}",
                 "{request}：跨轮（{scenario}）得到 {crossed}；同步时是 {sync}")


def same_as_synchronous(trial) -> Words | None:
    for sync, crossed in PAIRS:
        want, got = _outputs(trial.engine(sync)), _outputs(trial.learner(crossed))
        for rid, output in want.items():
            if got.get(rid) != output:
                return NOT_SYNC.format(request=rid, scenario=crossed.__name__, crossed=got.get(rid),
                                       sync=output)
    return None


def named(scenario, words: Words) -> Words:
    """``words``, said of one scenario."""
    return Words(f"{scenario.__name__}: {words.en}", f"{scenario.__name__}：{words.zh}")


NOT_LAUNCHED = Words("step {step} reads round {round}, which is not a launched round still unread",
                     "第 {step} 步读回第 {round} 轮，而它不是已发出、尚未读回的轮次")
WRONG_STEP = Words("step {step} reads round {round}, launched in step {launched}; it is read in step "
                   "{expected}",
                   "第 {step} 步读回第 {round} 轮（第 {launched} 步发出）；应当在第 {expected} 步读回")
READ_FIRST = Words("step {step} reads round {round} before it launches its own round",
                   "第 {step} 步先读回第 {round} 轮，后发出本步的轮次")
NEVER_READ = Words("round {round} was launched and never read", "第 {round} 轮发出后一直没有读回")


def _reads(run: Run, pipeline: bool) -> Words | None:
    """How the run's reads break the protocol (None: every launched round read once, in the right step)."""
    launched: dict[int, int] = {}  # round -> the step that launched it
    done: list[int] = []
    abandoned: set[int] = set()
    for index, event in enumerate(run.events):
        if event.kind == "launch":
            launched[event.data["round"]] = event.round_id
        elif event.kind == "error":
            abandoned.update(r for r in launched if r not in done)
        elif event.kind == "read":
            step, round_id = event.round_id, event.data["round"]
            if round_id not in launched or round_id in done or round_id in abandoned:
                return NOT_LAUNCHED.format(step=step, round=round_id)
            if step != launched[round_id] + int(pipeline):
                return WRONG_STEP.format(step=step, round=round_id, launched=launched[round_id],
                                         expected=launched[round_id] + int(pipeline))
            if any(e.kind == "launch" and e.round_id == step for e in run.events[index:]):
                return READ_FIRST.format(step=step, round=round_id)
            done.append(round_id)
    missing = [r for r in launched if r not in done and r not in abandoned]
    return NEVER_READ.format(round=missing[0]) if missing else None


def read_once(trial) -> Words | None:
    for scenario in SCENARIOS:
        broken = _reads(trial.learner(scenario), trial.engine(scenario).engine.pipeline is not None)
        if broken is not None:
            return named(scenario, broken)
    return None


def returns_commits(trial) -> Words | None:
    for scenario in (late, late_pipeline, *FAULTS):
        broken = delivered_as_committed(trial.learner(scenario))
        if broken is not None:
            return named(scenario, broken)
    return None


IN_FLIGHT_ERROR = Words("{request} ends as {got}: its round was in flight when the runner failed, so it ends "
                        "as error",
                        "{request} 的结果是 {got}：runner 出错时它的轮次正在飞行中，应当以 error 结束")
UNTOUCHED = Words("{request} ends as {got}; without the failure it gets {want} (a request with nothing in "
                  "flight carries on)",
                  "{request} 的结果是 {got}；没有出错时它得到 {want}（没有轮次在飞行中的请求照常运行）")


def _in_flight_at_error(run: Run) -> set[str]:
    """The requests of the rounds launched and unread when the runner failed, and of the round it failed to
    launch (scheduled in that step)."""
    for event, unread in in_flight_at(run.events):
        if event.kind == "error":
            scheduled = {e.request_id for e in run.events
                         if e.kind == "schedule" and e.round_id == event.round_id}
            return scheduled | {rid for requests in unread.values() for rid in requests}
    return set()


def failure_abandons_in_flight(trial) -> Words | None:
    for scenario in FAULTS:
        unfailed = late_pipeline if scenario in (read_fails_pipeline, launch_fails_pipeline) else late
        want, hit = _outputs(trial.engine(unfailed)), _in_flight_at_error(trial.engine(scenario))
        for rid, got in _outputs(trial.learner(scenario)).items():
            if rid in hit and got[1] != "error":
                return named(scenario, IN_FLIGHT_ERROR.format(request=rid, got=got))
            if rid not in hit and got != want[rid]:
                return named(scenario, UNTOUCHED.format(request=rid, got=got, want=want[rid]))
    return None


def every_slot_returned(trial) -> Words | None:
    for scenario in SCENARIOS:
        broken = slots_returned(trial.learner(scenario))
        if broken is not None:
            return named(scenario, broken)
    return None


CHECKS = (
    Check(Words("lesson 10's demo, lesson 1's, A/B/C, late arrivals and runner failures, synchronous and "
                "cross-round, equal the engine's, line by line",
                "第 10 课与第 1 课的演示、A/B/C、晚到的请求与 runner 出错，同步与跨轮，都与引擎逐行一致"),
          same_in(SCENARIOS)),
    Check(Words("cross-round tokens equal synchronous ones", "跨轮的 token 与同步相同"), same_as_synchronous,
          "what-to-notice"),
    Check(Words("every launched round is read exactly once, in order: in its own step synchronously, in the "
                "next step (after that step's launch) cross-round",
                "每个发出的轮次按顺序恰好读回一次：同步时在本步，跨轮时在下一步（在那一步发出之后）"),
          read_once),
    Check(Words("step() returns what the round it read committed", "step() 返回它读回的那一轮提交的内容"),
          returns_commits),
    Check(Words("a runner failure ends exactly the requests in flight as error; the others carry on",
                "runner 出错时恰好让在飞行中的请求以 error 结束；其余请求照常运行"),
          failure_abandons_in_flight),
    Check(Words("every KV and state slot returned at the end", "结束时所有 KV 与状态槽位都已归还"),
          every_slot_returned),
)
