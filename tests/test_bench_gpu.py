"""``python -m mini_deepinfer.bench.gpu``: what a CPU can check of the one command that measures a GPU.

The command itself measures only on a GPU or NPU. Here: it refuses a CPU in one line; its steps write into
the layout of ``snippets/`` (``bench/``, ``records/``) with no file written twice, and every step is a command
of this package; the quick plan fits its wall-time limit and is printed first; the manifest is saved after
every step, survives a killed step and a killed run, and ``--steps`` merges into it; the archive holds every
result. The no-stall check runs on the CPU at the tiny shape (no synchronising call can be caught there, so
a stand-in raises the error ``set_sync_debug_mode("error")`` raises) and fails on a failing launch, on a
synchronising call and on a round in the wrong mode. With CUDA at hand, the check runs for real.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from mini_deepinfer.bench import gpu
from mini_deepinfer.bench.gpu import (
    QUICK_BUDGETS_S,
    QUICK_WALL_S,
    Plan,
    Run,
    Step,
    graphs_equal_eager,
    launches_without_sync,
    main,
    no_stall_verdict,
    run_plan,
    select,
    steps,
)

ROOT = Path(__file__).resolve().parents[1]
PROVENANCE = {"commit": "0" * 40, "clean_tree": True, "device": "test", "torch": torch.__version__}
SCRIPT = ROOT / "site_scripts" / "performance" / "gpu_run.sh"


def tiny_model():
    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config

    return build_model(qwen3_5_config("tiny"), torch.float32, "cpu", seed=0)


def python_step(folder: Path, name: str, code: str, budget_s: float | None = None) -> Step:
    """A step that runs ``code`` as ``python -m step_NAME`` (a module written into ``folder``, the cwd)."""
    (folder / f"step_{name}.py").write_text(code, encoding="utf-8")
    return Step(name, (f"step_{name}",), budget_s)


def new_run(tmp_path: Path, plan: list[Step], wall_s: float | None = None) -> Run:
    out = tmp_path / "out"
    for sub in ("bench", "records", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    manifest = {"tag": "cuda-test-0000000", "plan": [{"step": s.name} for s in plan], "steps": []}
    return Run(out, tmp_path / "out.tar.gz", manifest, wall_s)


def archive_names(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return sorted(tar.getnames())


def test_bench_gpu_refuses_a_cpu_in_one_line(capsys):
    assert main(["--device", "cpu"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ("error: bench.gpu measures an accelerator: use --device "
                                                    "cuda[:N] or npu[:N] (or --dry-run)\n")


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_every_step_is_a_command_of_the_package_and_writes_its_own_file(tmp_path, quick):
    outputs = []
    plan = steps(Plan("cuda:0", tmp_path / "out", tmp_path / "weights", quick))
    for step in plan:
        assert importlib.util.find_spec(step.argv[0]) is not None, f"{step.name}: no module {step.argv[0]}"
        if "--output" in step.argv:
            path = Path(step.argv[step.argv.index("--output") + 1])
            assert path.parent.name in ("bench", "records") and path.parent.parent == tmp_path / "out"
            outputs.append(path)
        assert all(need in {s.name for s in plan} for need in step.needs)
    assert len(outputs) == len(set(outputs)) >= 10
    assert {s.execution for s in plan} >= {"graphs", "eager"}


def test_the_quick_plan_fits_its_wall_time_and_every_step_has_a_budget(tmp_path):
    plan = steps(Plan("cuda:0", tmp_path, tmp_path, quick=True))
    assert [s.name for s in plan] == list(QUICK_BUDGETS_S)
    default = select(plan, None, lambda s: True)
    assert [s.name for s in default] == [name for name in QUICK_BUDGETS_S if name not in gpu.ON_REQUEST]
    assert sum(s.budget_s for s in default) <= QUICK_WALL_S <= 360
    full = steps(Plan("cuda:0", tmp_path, tmp_path))
    assert [s.name for s in full] == [s.name for s in plan] and all(s.budget_s is None for s in full)
    text = gpu.format_plan(plan, QUICK_WALL_S)
    assert f"at most {QUICK_WALL_S} s" in text and "plan estimates, not measurements" in text
    assert all(f"{s.name}  " in text and f"{s.budget_s:.0f} s" in text for s in plan)


def test_the_plan_is_printed_before_the_first_step_runs(tmp_path, capsys, monkeypatch):
    def no_steps(run, plan, provenance):
        assert "budget" in capsys.readouterr().out  # printed already
        return run.manifest

    monkeypatch.setattr(gpu, "run_plan", no_steps)
    assert main(["--quick", "--dry-run", "--steps", "no-stall", "--output-dir", str(tmp_path / "o")]) == 0


def test_a_dry_run_uses_the_cpu_and_the_tiny_shape_only(tmp_path):
    plan = steps(Plan("cpu", tmp_path, tmp_path, True, gpu.DRY_RUN_SHAPES))
    presets = {s.argv[s.argv.index("--preset") + 1] for s in plan if "--preset" in s.argv}
    devices = {s.argv[s.argv.index("--device") + 1] for s in plan if "--device" in s.argv}
    assert presets == {"tiny"} and devices == {"cpu"}


def test_the_manifest_is_saved_after_every_step_and_a_failing_step_does_not_stop_the_next(tmp_path,
                                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = [python_step(tmp_path, "a", "import pathlib; pathlib.Path('out/bench/a.json').write_text('{}')"),
            python_step(tmp_path, "b", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
            python_step(tmp_path, "c", "import pathlib; pathlib.Path('out/records/c.json').write_text('{}')")]
    run = new_run(tmp_path, plan)
    manifest = run_plan(run, plan, PROVENANCE)
    assert [(e["step"], e["status"]) for e in manifest["steps"]] == [("a", "passed"), ("b", "failed"),
                                                                     ("c", "passed")]
    assert manifest["steps"][1]["exit_code"] == -signal.SIGKILL
    assert json.loads((run.out / "manifest.json").read_text()) == manifest
    names = archive_names(run.archive)
    assert {"cuda-test-0000000/manifest.json", "cuda-test-0000000/bench/a.json",
            "cuda-test-0000000/records/c.json", "cuda-test-0000000/logs/b.log"} <= set(names)
    for entry in manifest["steps"]:
        assert set(entry["provenance"]) == {"commit", "clean_tree", "device", "torch", "execution",
                                            "compiled"}


def test_a_step_past_its_limit_is_stopped_and_what_starts_after_the_wall_time_is_skipped(tmp_path,
                                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = [python_step(tmp_path, "slow", "import time; time.sleep(60)", budget_s=0.5),
            python_step(tmp_path, "late", "pass", budget_s=1.0)]
    run = new_run(tmp_path, plan, wall_s=1.5)
    start = time.monotonic()
    manifest = run_plan(run, plan, PROVENANCE)
    assert time.monotonic() - start < 10
    statuses = [(e["step"], e["status"]) for e in manifest["steps"]]
    assert statuses == [("slow", "timed out"), ("late", "skipped")]


KILLED_RUN = """
import sys
from pathlib import Path
from mini_deepinfer.bench.gpu import Run, Step, run_plan
out = Path(sys.argv[1])
for sub in ("bench", "records", "logs"):
    (out / sub).mkdir(parents=True, exist_ok=True)
plan = [Step("done", ("step_done",)), Step("hangs", ("step_hangs",))]
manifest = {"tag": "t", "plan": [{"step": s.name} for s in plan], "steps": []}
run = Run(out, out.with_name("out.tar.gz"), manifest)
run_plan(run, plan, {})
"""


def test_a_killed_run_keeps_the_manifest_and_archive_of_the_steps_that_finished(tmp_path):
    out, pid_file = tmp_path / "out", tmp_path / "hangs.pid"
    python_step(tmp_path, "done", "open('out/bench/done.json', 'w').write('{}')")
    python_step(tmp_path, "hangs", "import os, time; open('hangs.pid', 'w').write(str(os.getpid())); "
                                   "time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(out)], cwd=tmp_path)
    try:
        for _ in range(300):  # until the second step runs and the manifest may say so
            time.sleep(0.1)
            if pid_file.exists() and pid_file.read_text():
                time.sleep(0.5)
                break
    finally:
        proc.kill()  # SIGKILL: the run cannot write anything more
        proc.wait()
        if pid_file.exists() and pid_file.read_text():
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)  # the step has its own process group
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(e["step"], e["status"]) for e in manifest["steps"]] == [("done", "passed"), ("hangs", "running")]
    assert manifest["steps"][1]["pid"] == int(pid_file.read_text())
    assert "t/bench/done.json" in archive_names(tmp_path / "out.tar.gz")


INTERRUPTED_RUN = KILLED_RUN.replace("run_plan(run, plan, {})", """
from mini_deepinfer.tools.cli import run_command
sys.exit(run_command(lambda argv: run_plan(run, plan, {}) and 0, []))""")


def test_ctrl_c_stops_the_running_step_records_it_and_exits_130(tmp_path):
    out, pid_file = tmp_path / "out", tmp_path / "hangs.pid"
    python_step(tmp_path, "done", "open('out/bench/done.json', 'w').write('{}')")
    python_step(tmp_path, "hangs", "import os, time; open('hangs.pid', 'w').write(str(os.getpid())); "
                                   "time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED_RUN, str(out)], cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True)
    for _ in range(300):
        time.sleep(0.1)
        if pid_file.exists() and pid_file.read_text():
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err == "error: interrupted\n"
    with pytest.raises(ProcessLookupError):  # the step was stopped with the run
        os.kill(int(pid_file.read_text()), 0)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(e["step"], e["status"]) for e in manifest["steps"]] == [("done", "passed"),
                                                                     ("hangs", "interrupted")]


def test_steps_reruns_the_chosen_steps_and_merges_them_into_the_manifest(tmp_path, monkeypatch):
    out = tmp_path / "o"
    args = ["--quick", "--dry-run", "--output-dir", str(out), "--weights-dir", str(tmp_path / "w")]
    fake = {"status": "failed", "exit_code": 1, "seconds": 0.0, "output_tail": ""}
    monkeypatch.setattr(gpu, "run_step", lambda step, limit, run, entry: dict(fake))
    assert main([*args, "--steps", "speculative,no-stall"]) == 1
    first = json.loads((out / "manifest.json").read_text())
    fake["status"], fake["exit_code"] = "passed", 0
    assert main([*args, "--steps", "no-stall"]) == 0
    merged = json.loads((out / "manifest.json").read_text())
    assert [(e["step"], e["status"]) for e in merged["steps"]] == [("speculative", "failed"),
                                                                   ("no-stall", "passed")]
    assert merged["steps"][0] == first["steps"][0]
    assert {n.split("/", 1)[1] for n in archive_names(out.with_name("o.tar.gz"))} == {"manifest.json"}


def test_steps_drops_earlier_entries_of_another_commit(tmp_path, monkeypatch):
    out = tmp_path / "o"
    args = ["--quick", "--dry-run", "--output-dir", str(out), "--weights-dir", str(tmp_path / "w")]
    monkeypatch.setattr(gpu, "run_step", lambda step, limit, run, entry: {"status": "passed"})
    assert main([*args, "--steps", "speculative"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["steps"][0]["provenance"]["commit"] = "another"
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main([*args, "--steps", "no-stall"]) == 0
    assert [e["step"] for e in json.loads((out / "manifest.json").read_text())["steps"]] == ["no-stall"]


def test_steps_add_the_checkpoints_a_record_needs_only_when_they_are_missing(tmp_path):
    plan = steps(Plan("cuda:0", tmp_path / "out", tmp_path / "weights", quick=True))
    chosen = select(plan, ["record-speculative"], lambda s: False)
    assert [s.name for s in chosen] == ["checkpoint-2b", "checkpoint-0.8b", "record-speculative"]
    assert [s.name for s in select(plan, ["record-speculative"], lambda s: True)] == ["record-speculative"]


def test_steps_refuses_an_unknown_step_in_one_line(capsys):
    assert main(["--quick", "--dry-run", "--steps", "bench-eager,nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown step(s) nope: use checkpoint-2b, ") and err.count("\n") == 1


def test_the_device_tag_names_device_commit_and_a_dirty_tree():
    assert gpu.device_tag("cuda", "NVIDIA H200", {"sha": "1a2b3c4d5e", "dirty": False}, False) == \
        "cuda-h200-1a2b3c4"
    assert gpu.device_tag("cuda", "NVIDIA H200", {"sha": "1a2b3c4d5e", "dirty": True}, False) == \
        "cuda-h200-1a2b3c4-dirty"
    assert gpu.device_tag("cpu", "Xeon", {"sha": None, "dirty": None}, True) == "cpu-dry-run-unknown"


# --- the no-stall check --------------------------------------------------------------------------------

@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_the_no_stall_check_passes_steady_decode_rounds_on_cpu(graphs):
    result = launches_without_sync("cpu", graphs, rounds=6, model=tiny_model())
    assert result["passed"], result["problems"]
    assert (result["replay_rounds"], result["eager_rounds"]) == ((6, 0) if graphs else (0, 6))


class FailingForward:
    """A model forward that raises from its ``after``-th call on (the launch fails)."""

    def __init__(self, forward, after: int) -> None:
        self.forward, self.after, self.calls = forward, after, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls >= self.after:
            raise RuntimeError("injected failure in the forward")
        return self.forward(*args, **kwargs)


def test_the_no_stall_check_fails_when_a_checked_launch_fails():
    model = tiny_model()
    model.forward = FailingForward(model.forward, after=7)  # 4 rounds before the check, then 2 pass
    result = launches_without_sync("cpu", False, rounds=6, model=model)
    assert not result["passed"]
    assert "injected failure" in result["launch_errors"][0] and result["sync_calls"] == 0
    assert len(result["failed_requests"]) == 4
    assert any("launch(es) raised" in p for p in result["problems"])


def test_the_no_stall_check_fails_when_a_request_finished_with_an_error_even_if_no_launch_raised():
    verdict = no_stall_verdict(True, 24, {"graph": 24, "eager": 0}, [], {"r1": "NonFiniteLogitsError: ..."})
    assert not verdict["passed"] and verdict["problems"] == ["1 request(s) finished with an error"]


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_the_no_stall_check_fails_on_a_synchronising_call(graphs):
    calls = []

    @contextmanager
    def stand_in():  # what set_sync_debug_mode("error") does at the first synchronising call
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("called a synchronizing CUDA operation")
        yield

    result = launches_without_sync("cpu", graphs, rounds=6, model=tiny_model(), guard=stand_in)
    assert not result["passed"] and result["sync_calls"] == 1
    assert result["launch_errors"][0].startswith("round ")
    assert any("synchronising call" in p for p in result["problems"])
    assert len(result["failed_requests"]) == 4


def test_the_no_stall_check_fails_when_a_round_runs_eagerly_where_a_replay_was_expected():
    verdict = no_stall_verdict(True, 24, {"graph": 23, "eager": 1}, [], {})
    assert not verdict["passed"] and verdict["eager_rounds"] == 1
    assert "1 round(s) ran eager where graph was expected" in verdict["problems"]
    assert not no_stall_verdict(False, 24, {"graph": 24, "eager": 0}, [], {})["passed"]
    assert no_stall_verdict(True, 24, {"graph": 24, "eager": 0}, [], {})["passed"]


@pytest.mark.slow
def test_the_check_only_file_says_no_synchronising_call_can_be_caught_on_a_cpu(tmp_path):
    assert main(["--check-only", "--device", "cpu", "--preset", "tiny", "--output-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench" / "no-stall-cpu.json").read_text())
    assert result["sync_debug_mode"] is None and result["device"]["type"] == "cpu"
    assert [r["graphs"] for r in result["no_stall"]] == [False, True]
    assert result["graphs_equal_eager"]["passed"] and result["graphs_equal_eager"]["first_difference"] == {}


def test_the_compiled_check_runs_only_when_named_and_its_file_fails_when_the_tokens_differ(
    tmp_path, monkeypatch
):
    plan = steps(Plan("cuda:0", tmp_path, tmp_path, quick=True))
    (compiled,) = select(plan, ["compiled"], lambda s: True)
    assert compiled.compiled
    assert compiled.argv[:3] == ("mini_deepinfer.bench.gpu", "--check-only", "--compile")
    calls = []

    def differing(device, preset, compile_step=False, work=gpu.Workload()):
        calls.append((compile_step, work))
        return {"passed": False, "compiled": compile_step, "first_difference": {"r0": 3}}

    monkeypatch.setattr(gpu, "graphs_equal_eager", differing)
    assert main(["--check-only", "--compile", "--device", "cpu", "--output-dir", str(tmp_path)]) == 1
    assert calls == [(True, gpu.COMPILED_WORKLOAD)]
    result = json.loads((tmp_path / "bench" / "compiled-equal-eager-cpu.json").read_text())
    assert result["dtype"] == "float32" and result["graphs_equal_eager"]["first_difference"] == {"r0": 3}
    assert not (tmp_path / "bench" / "no-stall-cpu.json").exists()


def test_first_difference_names_the_first_position_that_differs():
    assert gpu.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert gpu.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert gpu.first_difference([1, 2], [1, 2, 3]) == 2


# --- the script a device slot runs ---------------------------------------------------------------------

def test_the_device_script_fits_one_command_line_and_parses():
    text = SCRIPT.read_text(encoding="utf-8")
    assert len(text) <= 2000
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    assert "--quick" in text and "gpu-results.tar.gz" in text


@pytest.mark.slow
def test_a_dry_run_of_the_quick_plan_runs_the_real_commands(tmp_path):
    out = tmp_path / "gpu-results"
    code = main(["--quick", "--dry-run", "--steps", "record-speculative", "--output-dir", str(out),
                 "--weights-dir", str(tmp_path / "weights")])
    manifest = json.loads((out / "manifest.json").read_text())
    assert code == 0, manifest
    ran = [e["step"] for e in manifest["steps"]]
    assert ran == ["checkpoint-2b", "checkpoint-0.8b", "record-speculative"]
    assert manifest["tag"].startswith("cpu-dry-run-") and manifest["dry_run"] is True
    tag = manifest["tag"]
    assert f"{tag}/records/stream-cancel.json" in archive_names(tmp_path / "gpu-results.tar.gz")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_steady_decode_launches_make_no_synchronising_call_on_cuda(graphs):
    result = launches_without_sync("cuda:0", graphs)
    assert result["passed"], result["problems"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_graphs_give_the_greedy_tokens_of_eager_execution_on_cuda():
    assert graphs_equal_eager("cuda:0")["passed"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_graphs_give_the_greedy_tokens_of_eager_execution_on_cuda():
    assert graphs_equal_eager("cuda:0", compile_step=True)["passed"]
