"""Bad input and Ctrl-C at the command line: exit code 2 (or 130), one stderr line, no traceback, no record.

The committed table ``snippets/reliability/bad-inputs.md`` is checked against a fresh run by
``tests/test_snippets_current.py``; here its rows are read back and held to the rules, and a real process is
interrupted while it generates.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from site_scripts.common import command_env

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
    from site_scripts.gen_reliability import KINDS

    kinds = {kind for kind, _, _ in KINDS}
    assert len(kinds) == 6
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
MOMENTS = [pytest.param(None, id="while-torch-loads"),
           pytest.param(1.0, id="a-second-later", marks=pytest.mark.slow)]


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc to see torch loading")
@pytest.mark.parametrize("after_torch_s", MOMENTS)
@pytest.mark.parametrize("command", list(CTRL_C_COMMANDS))
def test_ctrl_c_at_several_moments_exits_130_with_one_line(tiny_checkpoint, tmp_path, command, after_torch_s):
    out = tmp_path / "out"
    argv = [a.replace("{ckpt}", str(tiny_checkpoint)).replace("{out}", str(out))
            for a in CTRL_C_COMMANDS[command]]
    code, err = interrupt(argv, after_torch_s)
    if code is None:
        pytest.skip(f"{command} ended before the signal: {err[-200:]}")
    assert (code, err) == (130, "error: interrupted\n")
    assert list(tmp_path.iterdir()) == [], "nothing half-written is left"
