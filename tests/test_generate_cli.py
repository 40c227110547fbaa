"""``python -m mini_deepinfer.generate`` on a random tiny checkpoint: text, footer, record, stops, errors."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mini_deepinfer.generate import main
from mini_deepinfer.tools.records import RECORD_KEYS
from site_scripts.records.broken_checkpoints import edit_config, nan_embedding

ROOT = Path(__file__).resolve().parents[1]


def generate(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def base_args(ckpt, *extra: str) -> list[str]:
    return ["--model", str(ckpt), "--max-new-tokens", "8", "--cache-capacity", "128", *extra]


def test_two_prompts_print_text_and_footer_and_write_a_complete_record(tiny_checkpoint, capsys, tmp_path):
    out_file = tmp_path / "run.json"
    code, out, err = generate(capsys, *base_args(tiny_checkpoint,
                                                 "--prompt", "用两句话解释 KV Cache 的作用。",
                                                 "--prompt", "What is 1 plus 1?",
                                                 "--max-num-seqs", "2",
                                                 "--max-batched-tokens", "16", "--chunked-prefill",
                                                 "--output", str(out_file)))
    assert code == 0, err
    assert out.count("[length; 8 output tokens; free KV slots 128/128]") == 2
    record = json.loads(out_file.read_text(encoding="utf-8"))
    assert list(record)[: len(RECORD_KEYS)] == list(RECORD_KEYS)
    assert [len(r["output_token_ids"]) for r in record["requests"]] == [8, 8]
    assert record["cache"]["target"]["kv"] == {"capacity": 128, "free": 128}
    assert record["config"]["chunked_prefill"] is True
    assert record["timings"]["run_s"] > 0


def test_streamed_text_equals_the_final_text(tiny_checkpoint, capsys, tmp_path):
    out_file = tmp_path / "run.json"
    code, out, _ = generate(capsys, *base_args(tiny_checkpoint, "--prompt", "你好，世界", "--stream",
                                               "--temperature", "1.0", "--seed", "3",
                                               "--output", str(out_file)))
    assert code == 0
    text = json.loads(out_file.read_text(encoding="utf-8"))["requests"][0]["text"]
    assert out.startswith(text + "\n[")


@pytest.mark.parametrize("flags", [[], ["--pipeline"], ["--stagger-prompts", "--max-batched-tokens", "3",
                                                       "--chunked-prefill"]])
def test_greedy_text_is_the_same_in_every_execution_mode(tiny_checkpoint, capsys, tmp_path, flags):
    args = base_args(tiny_checkpoint, "--prompt", "a", "--prompt", "The capital of France is", "--raw",
                     "--output", str(tmp_path / "r.json"), *flags)
    assert main(args) == 0
    outputs = [r["output_token_ids"] for r in json.loads((tmp_path / "r.json").read_text())["requests"]]
    assert main(base_args(tiny_checkpoint, "--prompt", "a", "--prompt", "The capital of France is", "--raw",
                          "--output", str(tmp_path / "alone.json"), "--max-num-seqs", "1")) == 0
    alone = [r["output_token_ids"] for r in json.loads((tmp_path / "alone.json").read_text())["requests"]]
    capsys.readouterr()
    assert outputs == alone


@pytest.mark.parametrize("pipeline", [[], ["--pipeline"]])
def test_cancel_after_tokens_stops_and_returns_every_slot(tiny_checkpoint, capsys, pipeline):
    code, out, _ = generate(capsys, *base_args(tiny_checkpoint, "--prompt", "hello", "--raw", "--stream",
                                               "--cancel-after-tokens", "3", *pipeline))
    assert code == 0
    assert out.rstrip().endswith("[cancelled; 3 output tokens; free KV slots 128/128]")


def test_trace_rounds_prints_schedule_and_cache_lines(tiny_checkpoint, capsys):
    code, out, _ = generate(capsys, *base_args(tiny_checkpoint, "--prompt", "hi", "--raw", "--trace-rounds",
                                               "--pipeline"))
    assert code == 0
    assert "[round 1] schedule req-0 prefill" in out
    assert "[round 2] read round 1" in out
    assert "cache    KV free 128/128, state free 8/8" in out


BAD_INPUTS = {
    "missing folder": (["--model", "/nonexistent/x", "--prompt", "a"], "not found"),
    "no prompt": (["--model", "{ckpt}"], "at least one --prompt"),
    "negative max tokens": (["--model", "{ckpt}", "--prompt", "a", "--max-new-tokens", "-1"], ">= 0"),
    "zero capacity": (["--model", "{ckpt}", "--prompt", "a", "--cache-capacity", "0"], ">= 1"),
    "zero budget": (["--model", "{ckpt}", "--prompt", "a", "--max-batched-tokens", "0"], ">= 1"),
    "unknown device": (["--model", "{ckpt}", "--prompt", "a", "--device", "tpu"], "unknown device"),
    "cuda without cuda": (["--model", "{ckpt}", "--prompt", "a", "--device", "cuda:0"],
                          "CUDA is not available"),
    "npu without torch_npu": (["--model", "{ckpt}", "--prompt", "a", "--device", "npu"], "torch_npu"),
    "unknown dtype": (["--model", "{ckpt}", "--prompt", "a", "--dtype", "int7"], "int7"),
    "prompt too long": (["--model", "{ckpt}", "--prompt", "a " * 200, "--raw", "--cache-capacity", "64"],
                        "KV slots"),
    "output in missing folder": (["--model", "{ckpt}", "--prompt", "a", "--output", "/nonexistent/r.json"],
                                 "does not exist"),
    "unknown flag": (["--model", "{ckpt}", "--prompt", "a", "--frobnicate"], "unrecognized"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gives_one_line_on_stderr_and_exit_code_2(tiny_checkpoint, capsys, case):
    args, needle = BAD_INPUTS[case]
    code, out, err = generate(capsys, *[a.replace("{ckpt}", str(tiny_checkpoint)) for a in args])
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error:"), err
    assert needle in err


@pytest.mark.parametrize("flags", [[], ["--pipeline"], ["--prefix-cache", "--prefix-block", "4"]])
def test_a_cache_too_small_names_the_smallest_capacity_that_runs_and_one_less_does_not(
        tiny_checkpoint, capsys, flags):
    prompts = ["--prompt", "The capital of France is", "--prompt", "Hello there my good friend of old"]
    args = ["--model", str(tiny_checkpoint), *prompts, "--raw", "--max-new-tokens", "12", "--ignore-eos",
            *flags]
    code, out, err = generate(capsys, *args, "--cache-capacity", "4")
    assert code == 2 and not out
    assert err == ("error: req-0: prompt of 5 tokens plus --max-new-tokens 12 needs 17 KV slots; the cache "
                   "has 4: pass --cache-capacity 19 or more\n"), "the longer req-1 needs 7 + 12"
    code, out, err = generate(capsys, *args, "--cache-capacity", "19")
    assert code == 0 and out.count("[length; 12 output tokens;") == 2, err
    code, out, err = generate(capsys, *args, "--cache-capacity", "18")
    assert code == 2 and not out and err.count("\n") == 1 and "pass --cache-capacity 19 or more" in err


def test_prompt_file_that_is_not_utf8_is_refused(tiny_checkpoint, capsys, tmp_path):
    bad = tmp_path / "prompts.txt"
    bad.write_bytes("你好".encode("gbk"))
    code, _, err = generate(capsys, "--model", str(tiny_checkpoint), "--prompt-file", str(bad))
    assert code == 2 and "not UTF-8" in err


def test_bad_input_in_a_subprocess_prints_no_traceback_and_leaves_no_record(tmp_path):
    record = tmp_path / "r.json"
    argv = [sys.executable, "-m", "mini_deepinfer.generate", "--model", str(tmp_path / "none"),
            "--prompt", "a", "--output", str(record)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert not record.exists()


def test_version_flag_prints_the_package_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("mini-deepinfer 0.")


@pytest.mark.parametrize("mode", [[], ["--pipeline"]], ids=["sync", "cross-round"])
def test_non_finite_logits_end_the_run_with_one_line_naming_the_round_and_request(tiny_checkpoint, capsys,
                                                                                tmp_path, mode):
    """A checkpoint whose embedding is NaN used to print ``!!!!`` and exit 0: no token is sampled from NaN.
    Cross-round, round 2 is launched before round 1's flag is read and must not feed the flag back as a token
    (it once ended in the embedding's ``IndexError``)."""
    broken = tmp_path / "nan"
    shutil.copytree(tiny_checkpoint, broken)
    nan_embedding(broken)  # the broken checkpoint of the reliability table's NaN row
    out_file = tmp_path / "run.json"
    out_file.write_text("the record of an earlier run\n", encoding="utf-8")
    code, out, err = generate(capsys, *base_args(broken, "--prompt", "a", "--prompt", "b", "--raw",
                                                 "--output", str(out_file), *mode))
    assert code == 2 and err == "error: NonFiniteLogitsError: round 1: non-finite logits (NaN or inf) for " \
                                "req-0, req-1\n"
    assert out.count("[error; 0 output tokens; free KV slots 128/128]") == 2, "the slots came back"
    assert out_file.read_text(encoding="utf-8") == "the record of an earlier run\n", "a failed run keeps it"


def test_a_config_field_of_the_wrong_type_is_one_line_and_exit_2(tiny_checkpoint, capsys, tmp_path):
    broken = tmp_path / "wrong-type"
    shutil.copytree(tiny_checkpoint, broken)
    edit_config(broken, lambda c: c["text_config"].update(hidden_size="abc"))
    code, out, err = generate(capsys, *base_args(broken, "--prompt", "a", "--raw"))
    assert (code, out) == (2, "")
    assert err == f"error: {broken / 'config.json'}: hidden_size must be an integer, got 'abc'\n"


def test_the_record_says_whether_rounds_ran_on_graphs_and_the_tokens_do_not_change(tiny_checkpoint, capsys,
                                                                                    tmp_path):
    outputs = {}
    for flag in ("--eager", "--graphs"):
        out_file = tmp_path / f"{flag}.json"
        args = base_args(tiny_checkpoint, "--prompt", "a", "--prompt", "bc", "--raw", "--pipeline", flag,
                         "--output", str(out_file))
        code, _, err = generate(capsys, *args)
        assert code == 0, err
        record = json.loads(out_file.read_text(encoding="utf-8"))
        outputs[flag] = [r["output_token_ids"] for r in record["requests"]]
        execution = record["execution"]
        assert execution["graphs"] is (flag == "--graphs") and execution["captured"] is False  # a CPU
        assert (execution["rounds"]["graph"] > 0) is (flag == "--graphs")
    assert outputs["--graphs"] == outputs["--eager"]


def test_graphs_and_eager_together_are_refused(capsys):
    code, out, err = generate(capsys, "--model", "x", "--prompt", "a", "--graphs", "--eager")
    assert (code, out) == (2, "") and err == "error: argument --eager: not allowed with argument --graphs\n"


@pytest.mark.parametrize(("flags", "message"), [
    (["--eager"], "error: --compile compiles the graph path's decode step; it cannot be combined with "
                  "--eager (drop one)\n"),
    (["--speculative", "--draft-model", "y"], "error: --compile cannot be combined with --speculative: "
                                              "speculative rounds run eagerly (drop --compile)\n"),
    (["--temperature", "0.7"], "error: --compile runs only greedy decode rounds as graphs; with "
                               "--temperature 0.7 every round would run eagerly (drop --compile)\n"),
], ids=["eager", "speculative", "sampling"])
def test_compile_where_no_round_could_run_as_a_graph_is_one_line_and_exit_2(capsys, flags, message):
    code, out, err = generate(capsys, "--model", "x", "--prompt", "a", "--compile", *flags)
    assert (code, out, err) == (2, "", message)


@pytest.mark.slow
def test_compile_runs_the_graph_path_compiled_and_the_record_says_so(tiny_checkpoint, capsys, tmp_path):
    """One state slot and 64 KV slots: a single bucket to compile. The tokens are those of ``--eager``."""
    records = {}
    for flag in ("--eager", "--compile"):
        out_file = tmp_path / f"{flag}.json"
        args = base_args(tiny_checkpoint, "--prompt", "abc", "--raw", "--cache-capacity", "64",
                         "--max-num-seqs", "1", flag, "--output", str(out_file))
        code, _, err = generate(capsys, *args)
        assert code == 0, err
        records[flag] = json.loads(out_file.read_text(encoding="utf-8"))
    execution = records["--compile"]["execution"]
    assert execution["graphs"] is True and execution["compiled"] is True and execution["rounds"]["graph"] > 0
    assert records["--eager"]["execution"]["compiled"] is False
    tokens = {flag: [r["output_token_ids"] for r in record["requests"]] for flag, record in records.items()}
    assert tokens["--compile"] == tokens["--eager"]


def test_a_temperature_that_would_underflow_is_refused_on_both_paths(tiny_checkpoint, capsys):
    """1e-320 is 0 in float32: it used to sample token 0 (plain) or fail in the draw (speculative)."""
    from mini_deepinfer.core.request import SamplingParams

    plain = ["--model", str(tiny_checkpoint), "--prompt", "a", "--raw"]
    speculative = [*plain, "--speculative", "--draft-model", str(tiny_checkpoint)]
    for temperature in ("1e-320", "1e-6", "inf", "nan", "-1"):
        errors = {generate(capsys, *args, "--temperature", temperature)[2] for args in (plain, speculative)}
        assert errors == {f"error: --temperature must be 0 (greedy) or a finite number >= 1e-05, got "
                          f"{float(temperature)}\n"}, temperature
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=1e-320)


def int64_checkpoint(tiny_checkpoint, folder):
    from site_scripts.records.broken_checkpoints import int64_embedding

    shutil.copytree(tiny_checkpoint, folder)
    int64_embedding(folder)
    return folder


def odd_inputs(tiny_checkpoint, tmp_path) -> dict[str, tuple[list[str], str]]:
    """(arguments, expected message) of each odd input; every one is refused before any weight is read."""
    from site_scripts.records.broken_checkpoints import interval_zero

    rope, interval = tmp_path / "rope", tmp_path / "interval"
    for folder in (rope, interval):
        shutil.copytree(tiny_checkpoint, folder)
    edit_config(rope, lambda c: c["text_config"].update(rope_parameters="default"))
    edit_config(interval, interval_zero)
    model = ["--model", str(tiny_checkpoint)]
    return {
        "not UTF-8": ([*model, "--prompt", "ok", "--prompt", "a" + os.fsdecode(b"\xff")],
                      "--prompt 2 is not UTF-8 text (byte 0xff at character 1)"),
        "folder": ([*model, "--prompt-file", str(tmp_path)], f"prompt file {tmp_path} is a folder"),
        "rope string": (["--model", str(rope), "--prompt", "a"], "rope_parameters must be an object, got "
                                                                 "'default'"),
        "interval 0": (["--model", str(interval), "--prompt", "a"], "full_attention_interval must be an "
                                                                    "integer >= 1, got 0"),
        "seed": ([*model, "--prompt", "a", "--prompt", "b", "--temperature", "1", "--seed", str(2**64 - 1)],
                 f"--seed must be in 0..2**64-2 (request i gets SEED + i; 2 prompts), got {2**64 - 1}"),
        "int64": (["--model", str(int64_checkpoint(tiny_checkpoint, tmp_path / "int64")), "--prompt", "a"],
                  "weight dtype mismatch: model.embed_tokens.weight is stored as I64"),
    }


def test_odd_input_is_one_line_and_exit_2_before_the_weights_load(tiny_checkpoint, capsys, tmp_path,
                                                                  monkeypatch):
    from mini_deepinfer.models import loader

    def no_weights(*_):
        raise AssertionError("weights were read")

    monkeypatch.setattr(loader, "copy_weights", no_weights)
    for case, (args, message) in odd_inputs(tiny_checkpoint, tmp_path).items():
        code, out, err = generate(capsys, *args, "--raw", "--output", str(tmp_path / "r.json"))
        assert (code, out) == (2, ""), case
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, (case, err)
    assert not (tmp_path / "r.json").exists()


def test_a_byte_order_mark_is_not_part_of_the_prompt(tiny_checkpoint, capsys, tmp_path):
    prompts = {}
    for name, data in (("plain", b"Hello\n"), ("bom", b"\xef\xbb\xbfHello\n")):
        (tmp_path / name).write_bytes(data)
        out_file = tmp_path / f"{name}.json"
        args = base_args(tiny_checkpoint, "--prompt-file", str(tmp_path / name), "--raw", "--max-new-tokens",
                         "1", "--output", str(out_file))
        code, _, err = generate(capsys, *args)
        assert code == 0, err
        (request,) = json.loads(out_file.read_text(encoding="utf-8"))["requests"]
        prompts[name] = (request["prompt"], request["prompt_token_ids"])
    assert prompts["bom"] == prompts["plain"]


def test_a_record_can_be_written_into_a_fifo_that_stays_a_fifo(tiny_checkpoint, capsys, tmp_path):
    import threading

    fifo = tmp_path / "record.fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text(encoding="utf-8")), daemon=True)
    reader.start()
    code, _, err = generate(capsys, *base_args(tiny_checkpoint, "--prompt", "a", "--raw", "--output",
                                               str(fifo)))
    reader.join(timeout=60)
    assert code == 0, err
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert json.loads(received[0])["requests"][0]["prompt"] == "a"


def test_an_output_onto_a_file_of_the_checkpoint_is_refused(tiny_checkpoint, capsys, tmp_path):
    checkpoint = tmp_path / "tiny"
    shutil.copytree(tiny_checkpoint, checkpoint)
    config = (checkpoint / "config.json").read_bytes()
    code, out, err = generate(capsys, "--model", str(checkpoint), "--prompt", "a", "--output",
                              str(checkpoint / "config.json"))
    assert (code, out) == (2, "") and "is a file of the checkpoint --model" in err and err.count("\n") == 1
    assert (checkpoint / "config.json").read_bytes() == config


def test_options_are_made_by_keyword_only():
    from mini_deepinfer.generate import Options

    with pytest.raises(TypeError):
        Options("weights/tiny", "cpu")  # type: ignore[misc]
