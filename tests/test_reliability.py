"""Bad input and Ctrl-C at the command line: exit code 2 (or 130), one stderr line, no traceback, no record.

The committed table ``snippets/reliability/bad-inputs.md`` is checked against a fresh run by
``tests/test_snippets_current.py``; here its rows are read back and held to the rules, and a real process is
interrupted while it generates.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from site_scripts.build.common import command_env

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "snippets" / "reliability" / "bad-inputs.md"


def table_rows() -> list[list[str]]:
    """The body rows of the committed table, as lists of cells (``\\|`` kept inside a cell)."""
    lines = TABLE.read_text(encoding="utf-8").splitlines()[2:]
    return [[c.strip().replace("\\|", "|") for c in line.strip("|").split(" | ")] for line in lines]


def test_every_bad_input_in_the_table_exits_2_with_one_error_line():
    rows = table_rows()
    assert len(rows) >= 20
    for case, command, stderr, code in rows:
        assert code == "2", case
        assert command.startswith("`python -m mini_deepinfer.generate ") and "/tmp" not in command, case
        assert stderr.startswith("`error: ") and stderr.endswith("`") and "\n" not in stderr, case
        assert "Traceback" not in stderr


def test_the_table_covers_each_case_once():
    cases = [row[0] for row in table_rows()]
    assert len(cases) == len(set(cases))
    assert cases == sorted(cases)


def test_a_failed_run_leaves_no_output_file(tiny_checkpoint, tmp_path):
    record = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "mini_deepinfer.generate", "--model", str(tiny_checkpoint),
                           "--prompt", "Hello", "--raw", "--max-new-tokens", "-1", "--output", str(record)],
                          cwd=ROOT, env=command_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert not record.exists()


@pytest.mark.slow
def test_ctrl_c_while_generating_exits_130_with_one_line_and_no_record(tiny_checkpoint, tmp_path):
    record = tmp_path / "run.json"
    argv = [sys.executable, "-u", "-m", "mini_deepinfer.generate", "--model", str(tiny_checkpoint),
            "--prompt", "Hello", "--raw", "--ignore-eos", "--max-new-tokens", "100000",
            "--cache-capacity", "100100", "--stream", "--output", str(record)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=command_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.read(1)  # the first streamed byte: it is generating
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.decode("utf-8")
    assert proc.returncode == 130, text
    assert text == "error: interrupted\n"
    assert not record.exists()


def test_every_test_the_kinds_table_names_exists():
    from site_scripts.records.gen_reliability import KINDS

    kinds = {kind for kind, _, _ in KINDS}
    assert len(kinds) == 10
    for _, _, test in KINDS:
        path, _, name = test.partition("::")
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), test


# A bad flag for each command: refused before torch is imported (a Ctrl-C or a typo never waits for it).
BAD_FLAGS = {
    "mini_deepinfer.generate": ["--model", "x", "--prompt", "a", "--max-new-tokens", "-3"],
    "mini_deepinfer.random_checkpoint": ["--preset", "tiny", "--seed", str(2**70), "out"],
    "mini_deepinfer.model_draft_demo": ["--width", "17"],
    "mini_deepinfer.pipeline_demo": ["--kv-slots", "0"],
    "mini_deepinfer.__main__": ["--cancel", "req-0", "--cancel-after-round", "-1"],
    "mini_deepinfer.bench.rounds": ["--repeats", "0"],
    "mini_deepinfer.bench.speculative": ["--widths", "0"],
    "mini_deepinfer.bench.__main__": ["--repeats", "0"],
}


def test_every_command_refuses_a_bad_flag_before_importing_torch():
    script = ("import importlib, json, sys\n"
              "commands = json.loads(sys.argv[1])\n"
              "codes = {m: importlib.import_module(m).main(argv) for m, argv in commands.items()}\n"
              "print(json.dumps({'codes': codes, 'torch': 'torch' in sys.modules}))\n")
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(BAD_FLAGS)], cwd=ROOT, env=command_env(),
                          capture_output=True, text=True, timeout=120)
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["codes"] == dict.fromkeys(BAD_FLAGS, 2), proc.stderr
    assert result["torch"] is False
    lines = proc.stderr.splitlines()
    assert len(lines) == len(BAD_FLAGS) and all(line.startswith("error: ") for line in lines), proc.stderr


def test_settings_that_would_never_apply_or_give_garbage_are_refused(tiny_checkpoint, capsys, tmp_path):
    from mini_deepinfer import model_draft_demo
    from mini_deepinfer.__main__ import main as toy_main

    draft = tmp_path / "draft"
    for noise in ("inf", "nan", "-0.1"):
        argv = ["--write-draft", str(tiny_checkpoint), str(draft), "--noise", noise]
        assert model_draft_demo.main(argv) == 2
        assert capsys.readouterr().err == f"error: --noise must be a finite number >= 0, got {float(noise)}\n"
    assert not draft.exists()
    for argv, message in ((["--cancel", "req-0", "--cancel-after-round", "-1"], "must be >= 1"),
                          (["--cancel", "req-0", "--cancel-after-round", "0"], "must be >= 1"),
                          (["--cancel-after-round", "2"], "used only with --cancel")):
        assert toy_main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert toy_main(["--cancel", "req-1", "--cancel-after-round", "50"]) == 0
    assert "Not cancelled: req-1 finished before round 50 ended." in capsys.readouterr().out


def test_a_cache_larger_than_memory_is_refused_before_it_is_allocated(tiny_checkpoint, capsys, monkeypatch):
    from mini_deepinfer import pipeline_demo
    from mini_deepinfer.bench import rounds, speculative
    from mini_deepinfer.generate import main as generate_main
    from mini_deepinfer.models import cache

    def no_allocation(*_, **__):
        raise AssertionError("the cache was allocated")

    monkeypatch.setattr(cache.HybridCache, "__init__", no_allocation)
    model = ["--model", str(tiny_checkpoint), "--prompt", "a", "--raw"]
    cases = [(generate_main, [*model, "--cache-capacity", "1000000000000"], "KV 465.7 TiB, state 132.0 KiB"),
             (generate_main, [*model, "--max-num-seqs", "1000000000"], "KV 512.0 KiB, state 15.4 TiB"),
             (generate_main, [*model, "--max-num-seqs", "1000000000", "--speculative", "--draft-model",
                              str(tiny_checkpoint)], "KV 1.0 MiB, state 30.7 TiB"),
             (pipeline_demo.main, ["--kv-slots", "1000000000000"], "KV 465.7 TiB"),
             (pipeline_demo.main, ["--max-num-seqs", "1000000000"], "state 15.4 TiB"),
             (rounds.main, ["--preset", "tiny", "--new-tokens", "100000000000"], "KV 186.3 TiB"),
             (speculative.main, ["--preset", "tiny", "--new-tokens", "100000000000"], "KV 93.1 TiB")]
    for command, argv, needle in cases:
        assert command(argv) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1, captured.err
        assert needle in captured.err and "of memory on this machine" in captured.err, captured.err


@pytest.mark.parametrize("preset", ["tiny", "qwen2-tiny"])
@pytest.mark.parametrize("dummy_slots", [False, True])
def test_the_cache_size_checked_is_the_size_the_cache_allocates(preset, dummy_slots):
    import torch

    from mini_deepinfer.models.cache import HybridCache
    from mini_deepinfer.models.config import Qwen2Config
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.tools.memory import cache_bytes

    qwen2 = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2)
    config = qwen2 if preset == "qwen2-tiny" else qwen3_5_config("tiny")
    for dtype in (torch.float32, torch.bfloat16):
        allocated = HybridCache(config, 7, 3, dtype, "cpu", dummy_slots=dummy_slots).nbytes()
        computed = cache_bytes(config, 7, 3, dtype.itemsize, dummy_slots=dummy_slots)
        assert computed["kv"] + computed["state"] == allocated


def test_an_output_name_too_long_is_refused_before_the_run(tiny_checkpoint, capsys, tmp_path, monkeypatch):
    from mini_deepinfer.generate import main as generate_main
    from mini_deepinfer.models import loader

    monkeypatch.setattr(loader, "load_checkpoint", lambda *_: pytest.fail("the weights were loaded"))
    name = "r" * 300 + ".json"
    code = generate_main(["--model", str(tiny_checkpoint), "--prompt", "a", "--output", str(tmp_path / name)])
    assert code == 2
    assert capsys.readouterr().err.startswith("error: cannot write run record: file name is 305 bytes")


def torch_is_loading(proc: subprocess.Popen, timeout_s: float = 60) -> bool:
    """Wait until the process maps libtorch (it is importing torch); False if it ended first."""
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if "libtorch" in maps.read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            return False
        time.sleep(0.002)
    return False


def interrupt(argv: list[str], after_torch_s: float | None) -> tuple[int | None, str]:
    """Start ``python -m argv``, send SIGINT while torch loads (None) or that many seconds after it loaded;
    the exit code and stderr (None when the process ended before the signal)."""
    proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT, env=command_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not torch_is_loading(proc):
            return None, proc.communicate(timeout=60)[1].decode()
        if after_torch_s is not None:
            time.sleep(after_torch_s)
        if proc.poll() is not None:
            return None, proc.communicate(timeout=60)[1].decode()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err.decode("utf-8")


CTRL_C_COMMANDS = {
    "random_checkpoint": ["mini_deepinfer.random_checkpoint", "--preset", "tiny", "{out}"],
    "bench.rounds": ["mini_deepinfer.bench.rounds", "--preset", "tiny", "--requests", "1", "--repeats", "200",
                     "--new-tokens", "64"],
    "bench.speculative": ["mini_deepinfer.bench.speculative", "--preset", "tiny", "--repeats", "200",
                          "--widths", "1", "--new-tokens", "64"],
    "generate": ["mini_deepinfer.generate", "--model", "{ckpt}", "--prompt", "Hello", "--raw", "--ignore-eos",
                 "--max-new-tokens", "100000", "--cache-capacity", "100100", "--output", "{out}"],
    "pipeline_demo": ["mini_deepinfer.pipeline_demo"],
    "model_draft_demo": ["mini_deepinfer.model_draft_demo"],
}

STOP_DRIVER = '''"""python -m stop_driver SIGNAL MOMENT MODULE ARGS...: run MODULE as ``python -m`` does and
send SIGNAL to this process at MOMENT: "exec" (from inside the first string torch's import hands to exec: a
dataclass or namedtuple being built, where CPython notes a bare KeyboardInterrupt as unhandled) or a text that
the path of a file being opened contains."""
import builtins, os, runpy, signal, sys

name, moment, module, *args = sys.argv[1:]
signum, state = getattr(signal, name), {"torch": False, "sent": False}
real_exec = builtins.exec


def send() -> None:
    state["sent"] = True
    os.kill(os.getpid(), signum)


def exec_(source, *rest):
    if moment == "exec" and state["torch"] and not state["sent"] and isinstance(source, str):
        state["sent"] = True
        source = f"__import__('os').kill(__import__('os').getpid(), {int(signum)})\\n" + source
    return real_exec(source, *rest)


def hook(event, hook_args):
    if event == "import" and hook_args[0] == "torch":
        state["torch"] = True
    if event == "open" and moment != "exec" and not state["sent"] and moment in str(hook_args[0]):
        send()


builtins.exec = exec_
sys.addaudithook(hook)
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
'''


@pytest.fixture(scope="module")
def stop_driver(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("driver")
    (folder / "stop_driver.py").write_text(STOP_DRIVER, encoding="utf-8")
    return folder


def stopped(driver: Path, signal_name: str, moment: str, argv: list[str]) -> tuple[int, str]:
    """Run ``python -m MODULE ARGS`` through the driver, which sends the signal at a set moment."""
    env = command_env({"PYTHONPATH": os.pathsep.join([str(driver), str(ROOT)])})
    proc = subprocess.run([sys.executable, "-m", "stop_driver", signal_name, moment, *argv], cwd=ROOT,
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    return proc.returncode, proc.stderr.decode("utf-8")


MOMENTS = [pytest.param(None, id="inside-an-exec-while-torch-loads"),
           pytest.param(1.0, id="after-torch-has-loaded", marks=pytest.mark.slow)]
# Commands that end within a second of torch's import get their second moment set, not timed: the signal
# arrives as they import the model's code (a timed one could arrive as the run ends, and prove nothing).
SET_SECOND_MOMENT = {"pipeline_demo": "qwen3_5", "model_draft_demo": "qwen3_5"}


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc to see torch loading")
@pytest.mark.parametrize("after_torch_s", MOMENTS)
@pytest.mark.parametrize("command", list(CTRL_C_COMMANDS))
def test_ctrl_c_at_several_moments_exits_130_with_one_line(tiny_checkpoint, tmp_path, stop_driver, command,
                                                           after_torch_s):
    """The first moment is set, not timed: the signal arrives inside code that torch's import runs through
    ``exec`` (where it once ended the process by SIGINT after ``error: interrupted``), every time."""
    out = tmp_path / "out"
    argv = [a.replace("{ckpt}", str(tiny_checkpoint)).replace("{out}", str(out))
            for a in CTRL_C_COMMANDS[command]]
    if after_torch_s is None:
        code, err = stopped(stop_driver, "SIGINT", "exec", argv)
    elif command in SET_SECOND_MOMENT:
        code, err = stopped(stop_driver, "SIGINT", SET_SECOND_MOMENT[command], argv)
    else:
        code, err = interrupt(argv, after_torch_s)
        if code is None:
            pytest.skip(f"{command} ended before the signal: {err[-200:]}")
    assert (code, err) == (130, "error: interrupted\n")
    assert list(tmp_path.iterdir()) == [], "nothing half-written is left"


RACE = """import sys
from mini_deepinfer.tools.cli import run_command

def body(argv):
    try:
        exec("import os, signal, time\\nos.kill(os.getpid(), signal.{signal})\\ntime.sleep(30)")
    finally:
        print("cleanup started", flush=True)
        {second}
        print("cleanup finished", flush=True)

sys.exit(run_command(body, []))
"""


@pytest.mark.parametrize("signal_name, code, line", [("SIGINT", 130, "error: interrupted"),
                                                     ("SIGTERM", 143, "error: interrupted by SIGTERM"),
                                                     ("SIGHUP", 129, "error: interrupted by SIGHUP")])
def test_a_stop_signal_inside_exec_ends_with_its_code_after_cleanup_even_if_it_comes_twice(
        tmp_path, signal_name, code, line):
    """Deterministic: the signal is sent from inside a string run by ``exec`` under ``python -m``, and again
    while the command cleans up. A bare KeyboardInterrupt there made CPython end the process by SIGINT
    (status -2) after the command had printed its line and asked for 130."""
    second = f"__import__('os').kill(__import__('os').getpid(), __import__('signal').{signal_name}); " \
             "__import__('time').sleep(0.2)"
    (tmp_path / "race.py").write_text(RACE.format(signal=signal_name, second=second), encoding="utf-8")
    env = command_env({"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    proc = subprocess.run([sys.executable, "-m", "race"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stderr) == (code, line + "\n")
    assert proc.stdout == "cleanup started\ncleanup finished\n"


FINALIZER = """
import os, signal, sys, time
from mini_deepinfer.tools.cli import run_command


class Dropped:
    def __del__(self):
        os.kill(os.getpid(), signal.{signal})  # the handler runs here, where an exception cannot propagate


def body(argv):
    Dropped()
    for _ in range(500):
        time.sleep(0.01)
    print("ran to the end")
    return 0


sys.exit(run_command(body, []))
"""


@pytest.mark.parametrize("signal_name, code, line", [("SIGINT", 130, "error: interrupted"),
                                                     ("SIGTERM", 143, "error: interrupted by SIGTERM")])
def test_a_stop_signal_inside_a_finalizer_is_not_lost(tmp_path, signal_name, code, line):
    """Deterministic: the signal arrives inside ``__del__`` (importlib's module-lock weakref callbacks are
    the same case, met at random while torch loads). CPython swallows an exception raised there; the stop was
    lost and the command ran on. It is delivered again once the finalizer has returned."""
    (tmp_path / "finalizer.py").write_text(FINALIZER.replace("{signal}", signal_name), encoding="utf-8")
    env = command_env({"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    proc = subprocess.run([sys.executable, "-m", "finalizer"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr, proc.stdout) == (code, line + "\n", "")


WRITERS = {"random_checkpoint": ["mini_deepinfer.random_checkpoint", "--preset", "tiny", "{out}"],
           "write_draft": ["mini_deepinfer.model_draft_demo", "--write-draft", "{ckpt}", "{out}"]}


@pytest.mark.parametrize("signal_name, code, writer", [
    ("SIGTERM", 143, "write_draft"), ("SIGHUP", 129, "write_draft"),
    pytest.param("SIGTERM", 143, "random_checkpoint", marks=pytest.mark.slow)])  # builds the tokenizer first
def test_sigterm_or_sighup_while_a_checkpoint_is_written_leaves_nothing_behind(
        tiny_checkpoint, tmp_path, stop_driver, signal_name, code, writer):
    argv = [a.replace("{ckpt}", str(tiny_checkpoint)).replace("{out}", str(tmp_path / "out"))
            for a in WRITERS[writer]]
    result = stopped(stop_driver, signal_name, ".out.partial-", argv)
    assert result == (code, f"error: interrupted by {signal_name}\n")
    assert list(tmp_path.iterdir()) == [], "no hidden .partial- folder is left"


# ---------------------------------------------------------------------------------------------------------
# Inputs that are files: endless ones, ones the output would replace, lines that are not \n lines.
# ---------------------------------------------------------------------------------------------------------


def test_an_endless_prompt_file_is_refused_at_the_cap_the_help_states(capsys, tmp_path):
    from mini_deepinfer.generate import PROMPT_FILE_LIMIT, build_parser
    from mini_deepinfer.generate import main as generate_main

    assert f"at most {PROMPT_FILE_LIMIT // 2**20} MiB are read" in build_parser().format_help()
    assert generate_main(["--model", str(tmp_path), "--prompt-file", "/dev/zero"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: prompt file /dev/zero is larger than {PROMPT_FILE_LIMIT // 2**20} MiB, the most " \
                  "--prompt-file reads\n"


def test_a_prompt_file_has_one_prompt_per_newline_line(tmp_path):
    from mini_deepinfer.generate import read_prompt_file

    path = tmp_path / "prompts.txt"
    path.write_text("one\x0cstill one\u2028and still one\r\ntwo\x1c\x1dtwo\n\n  \nthree", encoding="utf-8")
    assert read_prompt_file(path) == ["one\x0cstill one\u2028and still one", "two\x1c\x1dtwo", "three"]


def test_an_output_that_is_the_prompt_file_is_refused_and_the_prompts_stay(capsys, tmp_path):
    from mini_deepinfer.generate import main as generate_main

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Hello\n", encoding="utf-8")
    link = tmp_path / "same.json"
    link.symlink_to(prompts)
    for output in (prompts, link):
        argv = ["--model", str(tmp_path), "--prompt-file", str(prompts), "--output", str(output)]
        assert generate_main(argv) == 2
        assert "is the --prompt-file" in capsys.readouterr().err
    assert prompts.read_text(encoding="utf-8") == "Hello\n"


# ---------------------------------------------------------------------------------------------------------
# Numbers the model was not built for, and weights that are no longer numbers.
# ---------------------------------------------------------------------------------------------------------


def test_a_prompt_past_max_position_embeddings_is_refused_before_the_weights_load(tiny_checkpoint, capsys,
                                                                                 tmp_path, monkeypatch):
    from mini_deepinfer.bench import rounds, speculative
    from mini_deepinfer.generate import main as generate_main
    from mini_deepinfer.models import loader
    from site_scripts.records.broken_checkpoints import edit_config

    folder = tmp_path / "short"
    shutil.copytree(tiny_checkpoint, folder)
    edit_config(folder, lambda c: c["text_config"].update(max_position_embeddings=16))
    monkeypatch.setattr(loader, "load_checkpoint", lambda *_: pytest.fail("the weights were loaded"))
    argv = ["--model", str(folder), "--prompt", "Hello world", "--raw", "--max-new-tokens", "15"]
    assert generate_main(argv) == 2
    assert capsys.readouterr().err == (f"error: req-0: a prompt of 2 tokens plus --max-new-tokens 15 needs "
                                       f"17 positions; --model {folder} has max_position_embeddings 16\n")
    for command in (rounds.main, speculative.main):
        assert command(["--preset", "tiny", "--new-tokens", "40000", "--repeats", "1"]) == 2
        err = capsys.readouterr().err
        assert "has max_position_embeddings 32768" in err and err.count("\n") == 1, err


def test_write_draft_refuses_noise_that_makes_weights_non_finite_and_writes_nothing(tiny_checkpoint, capsys,
                                                                                     tmp_path):
    from mini_deepinfer import model_draft_demo

    draft = tmp_path / "draft"
    assert model_draft_demo.main(["--write-draft", str(tiny_checkpoint), str(draft), "--noise", "1e300"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --noise 1e+300 makes ") and "non-finite in float32" in err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------
# A full disk: checked first where the size is known, one line where it is not, nothing half-written.
# ---------------------------------------------------------------------------------------------------------


def mount_of(path: Path) -> Path:
    path = Path(os.path.realpath(path))
    while not os.path.ismount(path):
        path = path.parent
    return path


def no_room(monkeypatch, free: int = 1000) -> None:
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10**9, 10**9 - free, free))


def test_writers_whose_size_is_known_check_the_free_space_first(tiny_checkpoint, capsys, tmp_path,
                                                                 monkeypatch):
    from mini_deepinfer import model_draft_demo, random_checkpoint

    no_room(monkeypatch)
    out = str(tmp_path / "out")
    for command, argv in ((random_checkpoint.main, ["--preset", "tiny", out]),
                          (model_draft_demo.main, ["--write-draft", str(tiny_checkpoint), out])):
        assert command(argv) == 2
        err = capsys.readouterr().err
        expected = f"error: no space left on device {mount_of(tmp_path)} for {out}: it needs "
        assert err.startswith(expected), err
        assert err.endswith(" MiB, 0.0 MiB are free\n") and list(tmp_path.iterdir()) == []


def enospc(*_, **__):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_disk_that_fills_while_writing_is_one_line_and_leaves_no_partial_file(tiny_checkpoint, capsys,
                                                                               tmp_path, monkeypatch):
    from mini_deepinfer import model_draft_demo
    from mini_deepinfer.tools import records

    record = tmp_path / "run.json"
    record.write_text("old record\n", encoding="utf-8")
    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", enospc)
        with pytest.raises(ValueError, match=rf"^no space left on device {mount_of(tmp_path)} for {record}$"):
            records.write_record(record, {"a": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"] and record.read_text() == "old record\n"
    record.unlink()
    monkeypatch.setattr(shutil, "copy2", enospc)
    assert model_draft_demo.main(["--write-draft", str(tiny_checkpoint), str(tmp_path / "draft")]) == 2
    err = capsys.readouterr().err
    expected = f"error: no space left on device {mount_of(tmp_path)} for {tmp_path}/.draft.partial-"
    assert err.startswith(expected) and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_a_file_size_limit_met_inside_safetensors_is_one_line(tiny_checkpoint, tmp_path):
    """A real failure inside the library's own writer (``ulimit -f``: EFBIG, which Python does not turn into
    a SIGXFSZ death), as a full disk would fail it: the limit lets the tokenizer be copied, not the weights.
    """
    import resource

    size = max(f.stat().st_size for f in tiny_checkpoint.iterdir() if f.suffix != ".safetensors") + 2**20

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    argv = [sys.executable, "-m", "mini_deepinfer.model_draft_demo", "--write-draft", str(tiny_checkpoint),
            f"{tmp_path}/draft"]
    proc = subprocess.run(argv, cwd=ROOT, env=command_env(), capture_output=True, text=True, timeout=120,
                          preexec_fn=limit)
    assert proc.returncode == 2, proc.stderr
    expected = (f"error: file size limit (ulimit -f) reached on device {mount_of(tmp_path)} for "
                f"{tmp_path}/.draft.partial-")
    assert proc.stderr.startswith(expected) and proc.stderr.endswith("/model.safetensors\n"), proc.stderr
    assert proc.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_a_utf8_prompt_under_the_c_locale_is_accepted_and_printed(tiny_checkpoint, tmp_path):
    """``LC_ALL=C PYTHONUTF8=0``: Python decodes the argument as ASCII, keeping the bytes as surrogates; the
    command takes them back as UTF-8, and what stdout's ASCII cannot show is printed as escapes."""
    env = command_env({"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "", "LANG": "C"})
    record = tmp_path / "run.json"
    argv = [sys.executable, "-m", "mini_deepinfer.generate", "--model", str(tiny_checkpoint), "--prompt",
            "你好", "--max-new-tokens", "8", "--temperature", "1", "--seed", "0", "--cache-capacity", "64",
            "--output", str(record)]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, b""), proc.stderr
    request = json.loads(record.read_text(encoding="utf-8"))["requests"][0]
    assert request["prompt"] == "你好" and not request["text"].isascii()  # sampled random tokens
    shown = request["text"].encode("ascii", "backslashreplace")
    assert proc.stdout.isascii() and shown in proc.stdout and b"[length; 8 output tokens" in proc.stdout


@pytest.mark.parametrize("command", [["mini_deepinfer"], ["mini_deepinfer.pipeline_demo"],
                                     ["mini_deepinfer.generate", "--model", "TINY", "--prompt", "Hello",
                                      "--max-new-tokens", "3"]], ids=["toy", "pipeline_demo", "generate"])
def test_a_reader_that_closes_stdout_ends_the_command_quietly_with_141(command, tiny_checkpoint):
    """``| head`` closes the pipe early: no traceback, no "Exception ignored" at exit, 128 + SIGPIPE."""
    argv = [sys.executable, "-m", *[str(tiny_checkpoint) if a == "TINY" else a for a in command]]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line
    try:
        proc = subprocess.run(argv, cwd=ROOT, env=command_env(), stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (128 + signal.SIGPIPE, "")
