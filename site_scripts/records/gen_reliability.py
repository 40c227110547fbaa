"""The two tables of the reliability section: every bad input run for real, and the kinds of failure held.

Scope: a random ``tiny`` checkpoint and broken copies of it in a temporary folder
(``broken_checkpoints.py`` writes them), running
``python -m mini_deepinfer.generate`` once per bad input (each forked from a Python that has imported torch:
``common.preloaded_python``), checking that each run ends with exit code 2 and exactly one stderr line without
a traceback, and rendering the results as a Markdown table. Paths under the
temporary folder are shown as ``weights/...``, the machine's memory as ``<memory>``, an undecodable argument
byte as ``$'\\xff'``, control characters in an argument as bash's ``$'...'`` escapes. The second table
lists each kind of failure the commands guard against and the test that holds it
(``tests/test_reliability.py`` checks that every test named there exists).
Non-scope: the error messages themselves (``generate.py``, the loader, the engine) and injected runner
failures (``tests/test_faults.py``).
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from pathlib import Path

from site_scripts.build.common import ROOT, GeneratorError, preloaded_python
from site_scripts.records.broken_checkpoints import prepare

PROMPT = ["--prompt", "Hello", "--raw"]
HIDDEN_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # the same message on a machine with or without a GPU
TIMEOUT_S = 300
TORCH_VERSION = re.compile(r"\(torch [^)]*\)")  # the installed build, not part of the message
MEMORY = re.compile(r"there are [0-9.]+ [KMGTP]?i?B of memory on this machine")  # differs by machine
NOT_UTF8 = "NOT_UTF8"
"""Stands for one argument byte that is not UTF-8 (0xff): run as that byte, shown as ``$'\\xff'``."""
FORGED = "FORGED"
"""Stands for a newline, a forged error line and an ANSI colour escape: run as those characters, shown as
bash's ``$'...'`` escapes."""
FORGED_TEXT, FORGED_SHOWN = "\nerror: a forged line\x1b[31m", "$'\\nerror: a forged line\\x1b[31m'"


def cases() -> list[tuple[str, list[str]]]:
    """(case, arguments after ``--model``-less ``generate``); ``{w}`` is the weights folder."""
    tiny = ["--model", "{w}/tiny", *PROMPT]
    spec = ["--model", "{w}/tiny", "--draft-model", "{w}/other-vocab", "--speculative", *PROMPT]
    self_draft = ["--model", "{w}/tiny", "--draft-model", "{w}/tiny", "--speculative", *PROMPT]
    return [
        ("missing folder", ["--model", "{w}/missing", *PROMPT]),
        ("empty folder", ["--model", "{w}/empty", *PROMPT]),
        ("corrupt config.json", ["--model", "{w}/corrupt-config", *PROMPT]),
        ("truncated safetensors", ["--model", "{w}/truncated", *PROMPT]),
        ("config and weight shapes disagree", ["--model", "{w}/wrong-shapes", *PROMPT]),
        ("config field of the wrong type", ["--model", "{w}/wrong-type", *PROMPT]),
        ("NaN weights (non-finite logits)", ["--model", "{w}/nan-embedding", *PROMPT]),
        ("unknown architecture", ["--model", "{w}/unknown-arch", *PROMPT]),
        ("draft with another vocabulary", spec),
        ("prompt longer than the cache", ["--model", "{w}/tiny", "--prompt", "The capital of France is",
                                          "--raw", "--cache-capacity", "4", "--max-new-tokens", "1"]),
        ("negative --max-new-tokens", [*tiny, "--max-new-tokens", "-1"]),
        ("zero --cache-capacity", [*tiny, "--cache-capacity", "0"]),
        ("zero --max-batched-tokens", [*tiny, "--max-batched-tokens", "0"]),
        ("--draft-width 0", [*self_draft, "--draft-width", "0"]),
        ("--draft-width 17", [*self_draft, "--draft-width", "17"]),
        ("--check-greedy with sampling", [*tiny, "--check-greedy", "--temperature", "1"]),
        ("unknown device", [*tiny, "--device", "tpu"]),
        ("npu without torch_npu", [*tiny, "--device", "npu"]),
        ("cuda:0 without CUDA", [*tiny, "--device", "cuda:0"]),
        ("unknown dtype", [*tiny, "--dtype", "int7"]),
        ("prompt file not UTF-8", ["--model", "{w}/tiny", "--prompt-file", "{w}/prompts-gbk.txt"]),
        ("--output in a missing folder", [*tiny, "--output", "{w}/missing/run.json"]),
        ("--temperature that underflows float32", [*tiny, "--temperature", "1e-320"]),
        ("--temperature 1e-320 with a draft", [*self_draft, "--temperature", "1e-320"]),
        ("--temperature inf", [*tiny, "--temperature", "inf"]),
        ("--seed 2**70", [*tiny, "--temperature", "0.8", "--seed", str(2**70)]),
        ("--graphs with a draft model", [*self_draft, "--graphs"]),
        ("--graphs with sampling", [*tiny, "--graphs", "--temperature", "0.8"]),
        ("--compile with --eager", [*tiny, "--compile", "--eager"]),
        ("--cache-capacity larger than memory", [*tiny, "--cache-capacity", "1000000000000"]),
        ("--max-num-seqs larger than memory", [*tiny, "--max-num-seqs", "1000000000"]),
        ("--prompt not UTF-8", ["--model", "{w}/tiny", "--prompt", NOT_UTF8, "--raw"]),
        ("--prompt-file naming a folder", ["--model", "{w}/tiny", "--prompt-file", "{w}"]),
        ("rope_parameters a string", ["--model", "{w}/rope-string", *PROMPT]),
        ("full_attention_interval 0", ["--model", "{w}/interval-zero", *PROMPT]),
        ("weight stored as int64", ["--model", "{w}/int64-embedding", *PROMPT]),
        ("index naming a shard outside the folder", ["--model", "{w}/index-outside", *PROMPT]),
        ("a tensor in two weight files", ["--model", "{w}/two-copies", *PROMPT]),
        ("config.json nested 100,000 deep", ["--model", "{w}/deep-config", *PROMPT]),
        ("eos_token of the wrong type", ["--model", "{w}/eos-typed", *PROMPT]),
        ("chat template that never ends", ["--model", "{w}/template-loops", "--prompt", "Hello"]),
        ("chat template that recurses", ["--model", "{w}/template-recurses", "--prompt", "Hello"]),
        ("prompt past max_position_embeddings", ["--model", "{w}/short-context", "--prompt", "Hello world",
                                                 "--raw", "--max-new-tokens", "15"]),
        ("--prompt-file /dev/zero", ["--model", "{w}/tiny", "--prompt-file", "/dev/zero"]),
        ("--output is the --prompt-file", ["--model", "{w}/tiny", "--prompt-file", "{w}/prompts.txt",
                                           "--output", "{w}/prompts.txt"]),
        *lying_input_cases(),
    ]


def lying_input_cases() -> list[tuple[str, list[str]]]:
    """Input that once ran silently wrong, failed late or printed a misleading or forged line."""
    return [
        ("tokenizer ids that collide", ["--model", "{w}/ids-collide", *PROMPT]),
        ("tokenizer id past vocab_size", ["--model", "{w}/id-past-vocab", *PROMPT]),
        ("added token on a vocabulary id", ["--model", "{w}/added-on-vocab-id", *PROMPT]),
        ("stop id past vocab_size", ["--model", "{w}/stop-id-past-vocab", *PROMPT]),
        ("partial_rotary_factor 2.0", ["--model", "{w}/rotary-past-head", *PROMPT]),
        ("newline and ANSI escape in --model", ["--model", "{w}/missing" + FORGED, *PROMPT]),
        ("--prefix-block without --prefix-cache", ["--model", "{w}/tiny", *PROMPT, "--prefix-block", "16"]),
        ("--top-k with greedy decoding", ["--model", "{w}/tiny", *PROMPT, "--top-k", "5"]),
        ("--model naming config.json", ["--model", "{w}/tiny/config.json", *PROMPT]),
        ("weight stored as float8", ["--model", "{w}/float8-embedding", *PROMPT]),
    ]


def run_case(args: list[str], root: Path) -> tuple[int, str]:
    """Run ``generate`` with ``args``; return its exit code and its single stderr line (paths masked).

    The command is ``python -m mini_deepinfer.generate`` forked from the generators' helper Python, which has
    imported torch and nothing of this package (``common.preloaded_python``): the command runs from its
    ``main`` as a fresh one would, without paying for torch's import (1 to 1.5 s) in each of the cases.
    """
    argv = [a.replace("{w}", str(root)).replace(NOT_UTF8, os.fsdecode(b"\xff")).replace(FORGED, FORGED_TEXT)
            for a in args]
    proc = preloaded_python(HIDDEN_GPU).run_module(ROOT, "mini_deepinfer.generate", *argv, timeout=TIMEOUT_S)
    err = TORCH_VERSION.sub("(torch <version>)", proc.stderr.replace(str(root), "weights"))
    err = MEMORY.sub("there are <memory> of memory on this machine", err)
    if proc.returncode != 2 or err.count("\n") != 1 or not err.endswith("\n") or "Traceback" in err:
        raise GeneratorError(f"{args}: expected exit 2 and one stderr line, got {proc.returncode}:\n{err}")
    return proc.returncode, err.rstrip("\n")


def cell(text: str) -> str:
    """Inline code for a Markdown table cell (``|`` escaped)."""
    return "`" + text.replace("|", "\\|") + "`"


def shown_command(args: list[str]) -> str:
    command = shlex.join(["python", "-m", "mini_deepinfer.generate",
                          *[a.replace("{w}", "weights") for a in args]])
    return command.replace(NOT_UTF8, "$'\\xff'").replace(FORGED, FORGED_SHOWN)


def bad_inputs_table() -> str:
    """The Markdown table: case, command, stderr line, exit code."""
    lines = ["| Case | Command | stderr | Exit |", "| --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        prepare(root)
        for case, args in sorted(cases()):
            code, err = run_case(args, root)
            lines.append(f"| {case} | {cell(shown_command(args))} | {cell(err)} | {code} |")
    return "\n".join(lines) + "\n"


_ROWS: tuple[tuple[str, str, str], ...] = (
    ("Data lost", "a failed run (exit 2) keeps an existing `--output` file as it was",
     "tests/test_generate_cli.py::test_non_finite_logits_end_the_run_with_one_line_naming_the_round_and_request"),
    ("Data lost", "`--output` onto a file of the checkpoint being read is refused before the run",
     "tests/test_generate_cli.py::test_an_output_onto_a_file_of_the_checkpoint_is_refused"),
    ("Data lost", "`--force` never replaces the folder the command runs in, or one that holds it",
     "tests/test_random_checkpoint.py::test_force_never_replaces_the_folder_it_runs_in_or_one_that_holds_it"),
    ("Data lost", "`--write-draft` refuses a draft folder that is, is inside or holds its source",
     "tests/test_speculative_cli.py::test_write_draft_never_writes_into_or_around_its_source"),
    ("Silent garbage", "a temperature below 1e-5 or not finite is refused on the plain and speculative paths",
     "tests/test_generate_cli.py::test_a_temperature_that_would_underflow_is_refused_on_both_paths"),
    ("Silent garbage", "the smallest temperature, 1e-5, samples the greedy tokens on both paths",
     "tests/test_speculative_cli.py::test_the_smallest_temperature_gives_the_greedy_tokens_on_both_paths"),
    ("Silent garbage", "`--noise inf` and a toy `--cancel-after-round -1` are refused",
     "tests/test_reliability.py::test_settings_that_would_never_apply_or_give_garbage_are_refused"),
    ("Contradictory flags", "`--graphs` with a draft or with sampling is refused, and `--help` says so",
     "tests/test_speculative_cli.py::test_graphs_where_no_round_could_run_as_a_graph_is_refused_and_help_says_so"),
    ("Contradictory flags", "a speculative run's record says its rounds ran eagerly",
     "tests/test_speculative_cli.py::test_the_record_of_a_speculative_run_says_its_rounds_ran_eagerly"),
    ("Resources no machine has", "a cache larger than memory is one line naming its size, before allocating",
     "tests/test_reliability.py::test_a_cache_larger_than_memory_is_refused_before_it_is_allocated"),
    ("Resources no machine has", "the toy demo's `--slots 1000000000000` holds memory for used slots only",
     "tests/test_slots.py::test_a_pool_of_a_trillion_slots_holds_only_the_slots_handed_out"),
    ("Resources no machine has", "the size the commands compute is the size the cache allocates",
     "tests/test_reliability.py::test_the_cache_size_checked_is_the_size_the_cache_allocates"),
    ("Tracebacks on odd input", "odd prompts, prompt files, config values and seeds are one line, exit 2",
     "tests/test_generate_cli.py::test_odd_input_is_one_line_and_exit_2_before_the_weights_load"),
    ("Tracebacks on odd input", "a byte-order mark at the start of a prompt file is not a token",
     "tests/test_generate_cli.py::test_a_byte_order_mark_is_not_part_of_the_prompt"),
    ("Tracebacks on odd input", "every command checks its flags before it imports torch",
     "tests/test_reliability.py::test_every_command_refuses_a_bad_flag_before_importing_torch"),
    ("Tracebacks on odd input", "Ctrl-C while torch loads, and later, is `error: interrupted`, exit 130",
     "tests/test_reliability.py::test_ctrl_c_at_several_moments_exits_130_with_one_line"),
    ("Tracebacks on odd input", "a signal inside code torch runs via `exec` still exits 130, not by SIGINT",
     "tests/test_reliability.py::"
     "test_a_stop_signal_inside_exec_ends_with_its_code_after_cleanup_even_if_it_comes_twice"),
    ("Tracebacks on odd input", "JSON nested 100,000 deep in a checkpoint's files is one line, exit 2",
     "tests/test_loader.py::test_json_nested_too_deep_is_one_line"),
    ("Tracebacks on odd input", "a wrongly typed `eos_token` or `chat_template` is one line naming the field",
     "tests/test_text.py::test_a_wrongly_typed_tokenizer_field_is_one_line_naming_it"),
    ("Tracebacks on odd input", "`--prompt-file /dev/zero` stops at the 16 MiB cap that `--help` states",
     "tests/test_reliability.py::test_an_endless_prompt_file_is_refused_at_the_cap_the_help_states"),
    ("Untrusted checkpoint files", "an index entry or a link that leads outside the folder is refused",
     "tests/test_loader.py::test_a_shard_the_index_names_outside_the_folder_is_refused_naming_the_entry"),
    ("Untrusted checkpoint files", "`<|im_end|>` typed into a prompt stays text under the chat template",
     "tests/test_text.py::test_special_tokens_typed_into_a_prompt_stay_text_under_the_chat_template"),
    ("Untrusted checkpoint files", "a template that loops, recurses or raises is one line in 5 s at most",
     "tests/test_text.py::test_every_chat_template_failure_is_one_line_naming_the_template"),
    ("Data lost", "`--output` onto the `--prompt-file` is refused; the prompts stay",
     "tests/test_reliability.py::test_an_output_that_is_the_prompt_file_is_refused_and_the_prompts_stay"),
    ("Data lost", "SIGTERM or SIGHUP while a checkpoint is written leaves no hidden `.partial-` folder",
     "tests/test_reliability.py::test_sigterm_or_sighup_while_a_checkpoint_is_written_leaves_nothing_behind"),
    ("Data lost", "training: a full disk or Ctrl-C leaves each model folder whole or as it was",
     "tests/test_training_errors.py::test_a_model_folder_is_replaced_whole_or_not_at_all"),
    ("Silent garbage", "`--write-draft` refuses noise that makes a weight non-finite, writing nothing",
     "tests/test_reliability.py::test_write_draft_refuses_noise_that_makes_weights_non_finite_and_writes_nothing"),
    ("Silent garbage", "a tensor that two weight files hold is refused, naming both",
     "tests/test_loader.py::test_a_tensor_two_shards_hold_is_refused_naming_both_files"),
    ("Silent garbage", "a prompt file has one prompt per `\\n` line (not per form feed or U+2028)",
     "tests/test_reliability.py::test_a_prompt_file_has_one_prompt_per_newline_line"),
    ("Silent garbage", "a prompt plus `--max-new-tokens` past `max_position_embeddings` is refused",
     "tests/test_reliability.py::test_a_prompt_past_max_position_embeddings_is_refused_before_the_weights_load"),
    ("Refused by mistake", "a UTF-8 `--prompt` under `LC_ALL=C PYTHONUTF8=0` runs; stdout shows escapes",
     "tests/test_reliability.py::test_a_utf8_prompt_under_the_c_locale_is_accepted_and_printed"),
    ("Outputs that are not plain files", "a FIFO or `/dev/fd/N` is written into, never renamed over",
     "tests/test_records.py::test_a_record_is_written_into_a_fifo_and_the_fifo_stays"),
    ("Outputs that are not plain files", "a name the file system cannot hold is refused before the run",
     "tests/test_reliability.py::test_an_output_name_too_long_is_refused_before_the_run"),
    ("Resources no machine has", "a checkpoint larger than the free disk is refused before it is written",
     "tests/test_reliability.py::test_writers_whose_size_is_known_check_the_free_space_first"),
    ("Resources no machine has", "a disk that fills while writing is one line; no partial file is left",
     "tests/test_reliability.py::test_a_disk_that_fills_while_writing_is_one_line_and_leaves_no_partial_file"),
    ("Resources no machine has", "a file size limit met inside safetensors' own writer is one line too",
     "tests/test_reliability.py::test_a_file_size_limit_met_inside_safetensors_is_one_line"),
    ("Silent garbage", "a `tokenizer.json` whose ids collide or pass `vocab_size` is refused at load",
     "tests/test_faults_input.py::"
     "test_a_tokenizer_whose_ids_lie_is_refused_before_the_weights_naming_the_file_and_the_entry"),
    ("Tracebacks on odd input", "every `config.json` field a model reads is checked against its range",
     "tests/test_faults_input.py::"
     "test_every_field_the_models_read_is_refused_out_of_range_naming_config_json_and_the_field"),
    ("Tracebacks on odd input", "training: a substituted corpus archive is one line, exit 2, before any use",
     "tests/test_training_errors.py::test_a_substituted_archive_is_one_line_and_exit_2"),
    ("Tracebacks on odd input", "training: a missing OpenCC is one line naming the `.[train]` extra",
     "tests/test_training_errors.py::test_a_missing_opencc_is_one_line_naming_the_extra"),
    ("Forged log lines", "a newline, CR or ANSI escape a user gave is escaped in every command's message",
     "tests/test_faults_input.py::"
     "test_a_newline_cr_or_ansi_escape_in_what_the_user_gave_is_escaped_in_every_command_s_message"),
    ("Contradictory flags", "an option that means nothing without another is refused (one table per command)",
     "tests/test_faults_input.py::test_an_option_that_needs_another_is_refused_alone_and_accepted_with_it"),
    ("Contradictory flags", "an option that means nothing with another is refused (the same tables)",
     "tests/test_faults_input.py::"
     "test_an_option_that_means_nothing_with_another_is_refused_with_it_and_accepted_alone"),
    ("Resources no machine has", "every benchmark checks its sizes against positions and memory first",
     "tests/test_faults_input.py::"
     "test_a_benchmark_size_past_positions_or_memory_is_one_line_before_anything_is_allocated"),
    ("Messages that mislead", "a file given as a checkpoint folder is called a file, not a missing folder",
     "tests/test_faults_input.py::test_a_file_given_as_the_checkpoint_folder_is_called_a_file"),
    ("Messages that mislead", "a float8 weight is refused naming the dtypes the loader reads",
     "tests/test_faults_input.py::test_a_float8_weight_is_refused_naming_the_dtypes_the_loader_reads"),
)
ORDER = ("Untrusted checkpoint files", "Data lost", "Silent garbage", "Contradictory flags",
         "Resources no machine has", "Tracebacks on odd input", "Refused by mistake",
         "Outputs that are not plain files", "Forged log lines", "Messages that mislead")
KINDS = tuple(sorted(_ROWS, key=lambda row: ORDER.index(row[0])))
"""(kind, what holds, the test that holds it): the rows of the second table, grouped by kind."""


def kinds_table() -> str:
    """The Markdown table of :data:`KINDS`."""
    lines = ["| Kind | What holds | Test |", "| --- | --- | --- |"]
    for kind, rule, test in KINDS:
        lines.append(f"| {kind} | {rule} | {cell(test)} |")
    return "\n".join(lines) + "\n"


OUTPUTS = {"reliability/bad-inputs.md": bad_inputs_table, "reliability/kinds.md": kinds_table}
