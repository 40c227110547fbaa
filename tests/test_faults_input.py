"""Hostile and odd input the commands must refuse in one line (exit code 2) instead of running silently wrong
or failing late: tokenizers whose ids lie, config fields out of range, control characters in what the user
gave, options that mean nothing without another, benchmark sizes past memory, messages that say the wrong
thing.

Every case runs in this process through the command's ``main`` (or the loader and text layer it calls), on
copies of the small files of ``trained/target``: each refusal comes before a weight is read, so no case needs
the weights.
"""

from __future__ import annotations

import importlib
import json
import math
import shutil
from pathlib import Path

import pytest

from mini_deepinfer.tools.tokenizer_files import byte_to_unicode

ROOT = Path(__file__).resolve().parent.parent
TRAINED = ROOT / "trained" / "target"
TEXT_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")


def byte_level(text: str) -> str:
    """``text`` as a byte-level BPE vocabulary spells it (``方`` is ``æĸ¹``)."""
    alphabet = byte_to_unicode()
    return "".join(alphabet[b] for b in text.encode("utf-8"))


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def text_folder(tmp_path: Path, file: str | None = None, change=None) -> Path:
    """A copy of the trained target without its weights, with ``change`` applied to one of its JSON files."""
    folder = tmp_path / "model"
    folder.mkdir()
    for name in TEXT_FILES:
        shutil.copy(TRAINED / name, folder / name)
    if file is not None:
        edit_json(folder / file, change)
    return folder


def run_main(module: str, argv: list[str], capsys) -> tuple[int, str]:
    """Run ``python -m MODULE ARGV`` in this process; its exit code and its stderr."""
    code = importlib.import_module(module).main(argv)
    return code, capsys.readouterr().err


def one_line(code: int, err: str) -> str:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and err.endswith("\n"), repr(err)
    assert "Traceback" not in err
    return err


# -- 1, 2: tokenizer ids -------------------------------------------------------------------------------------

FANG, ZI = byte_level("方"), byte_level("子")


def same_id(data: dict) -> None:  # 方 gets the id of 子: "东方红" would reach the model as "东子红"
    data["model"]["vocab"][FANG] = data["model"]["vocab"][ZI]


def added_on_vocab_id(data: dict) -> None:  # <|im_end|> listed with the id of 子
    data["added_tokens"][2]["id"] = data["model"]["vocab"][ZI]


def two_added_one_id(data: dict) -> None:
    data["added_tokens"][2]["id"] = data["added_tokens"][1]["id"]


def added_string_of_the_vocabulary(data: dict) -> None:  # 子 added as 4095: the library keeps it 501
    data["added_tokens"][2]["content"] = ZI


def vocab_past(data: dict) -> None:  # config.json says vocab_size 4096
    data["model"]["vocab"][FANG] = 5000


def added_past(data: dict) -> None:
    data["added_tokens"][2]["id"] = 5000


TOKENIZER_LIES = {
    "two vocabulary entries, one id": (same_id, [repr(FANG), repr(ZI), "id 501"]),
    "an added token on a vocabulary id": (added_on_vocab_id, ["'<|im_end|>'", repr(ZI), "id 501"]),
    "two added tokens, one id": (two_added_one_id, ["'<|im_end|>'", "'<|im_start|>'", "id 4094"]),
    "an added string of the vocabulary": (added_string_of_the_vocabulary, [repr(ZI), "4095", "id 501"]),
    "a vocabulary id past vocab_size": (vocab_past, [repr(FANG), "5000", "vocab_size 4096"]),
    "an added id past vocab_size": (added_past, ["'<|im_end|>'", "5000"]),
}


@pytest.mark.parametrize("case", TOKENIZER_LIES)
def test_a_tokenizer_whose_ids_lie_is_refused_before_the_weights_naming_the_file_and_the_entry(
        case, tmp_path, capsys):
    change, named = TOKENIZER_LIES[case]
    folder = text_folder(tmp_path, "tokenizer.json", change)
    argv = ["--model", str(folder), "--prompt", "东方红", "--raw"]
    err = one_line(*run_main("mini_deepinfer.generate", argv, capsys))
    assert f"{folder / 'tokenizer.json'}: " in err, err
    for part in named:
        assert part in err, (part, err)


def test_a_stop_id_past_the_vocabulary_is_refused_before_the_weights(tmp_path, capsys):
    folder = text_folder(tmp_path, "generation_config.json", lambda g: g.update(eos_token_id=[4095, 9000]))
    err = one_line(*run_main("mini_deepinfer.generate", ["--model", str(folder), "--prompt", "a", "--raw"],
                             capsys))
    assert "stop id 9000" in err and "vocab_size 4096" in err and "config.json" in err, err


def test_the_ids_read_without_the_merges_equal_the_whole_file_in_any_layout():
    from mini_deepinfer.runtime.text import _ids_part

    whole = json.loads((TRAINED / "tokenizer.json").read_text(encoding="utf-8"))
    model_first = {"model": whole["model"], **{k: v for k, v in whole.items() if k != "model"}}
    merges_first = {**whole, "model": {"merges": whole["model"]["merges"], **whole["model"]}}
    for layout in (whole, model_first, merges_first):
        for text in (json.dumps(layout), json.dumps(layout, indent=2, ensure_ascii=False)):
            part = _ids_part(" \n" + text)
            assert part["added_tokens"] == whole["added_tokens"]
            assert list(part["model"]["vocab"].items()) == list(whole["model"]["vocab"].items())


def test_the_trained_tokenizer_passes_the_id_checks():
    from mini_deepinfer.runtime.text import TextTokenizer

    tokenizer = TextTokenizer.from_file(TRAINED / "tokenizer.json")
    assert tokenizer.largest.token_id == 4095 and tokenizer.largest.token == "<|im_end|>"
    tokenizer.check_ids_below(4096, "config.json")
    with pytest.raises(ValueError, match="'<|im_end|>' has id 4095, but config.json has vocab_size 4095"):
        tokenizer.check_ids_below(4095, "config.json")


# -- 3: config fields ----------------------------------------------------------------------------------------

INF, NAN = math.inf, math.nan
# Out-of-range values for every field a model reads, written here apart from the code's own table.
QWEN3_5_BAD: dict[str, list] = {
    "vocab_size": [0, -1, 2.5, "4096"], "hidden_size": [0, -256], "intermediate_size": [0],
    "num_hidden_layers": [0, -4], "num_attention_heads": [0, 3], "num_key_value_heads": [0, 3, 16],
    "head_dim": [0, 6], "rms_norm_eps": [0, -1e-6, INF, NAN], "rope_theta": [0, -1.0, INF, NAN],
    "partial_rotary_factor": [0, 2.0, -0.25, NAN, 0.01, 0.3], "attention_bias": ["false", 0],
    "linear_conv_kernel_dim": [0, -4], "linear_key_head_dim": [0], "linear_value_head_dim": [0],
    "linear_num_key_heads": [0, 3], "linear_num_value_heads": [0, 6], "tie_word_embeddings": ["yes"],
    "max_position_embeddings": [0, -1], "initializer_range": [-0.02, INF, NAN],
    "eos_token_id": [-1, 4096, "4095", [4095, 4096], 1.5],
    "layer_types": [["linear_attention"] * 3 + ["sliding_attention"], ["linear_attention"] * 3 + [{}]],
}
QWEN2_BAD: dict[str, list] = {
    "vocab_size": [0], "hidden_size": [0], "intermediate_size": [0], "num_hidden_layers": [0],
    "num_attention_heads": [0, 5, 2048], "num_key_value_heads": [0, 5], "head_dim": [-1, 7],
    "rms_norm_eps": [0, INF], "rope_theta": [0, NAN], "tie_word_embeddings": [1],
    "max_position_embeddings": [0], "initializer_range": [-1.0], "eos_token_id": [151936, -5],
}
QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936,
         "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 2, "num_attention_heads": 12,
         "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "max_position_embeddings": 4096, "eos_token_id": 151643}
ROPE_FIELDS = ("rope_theta", "partial_rotary_factor")  # Qwen3.5 keeps them in rope_parameters
NOT_READ = {"architecture", "checkpoint_dtype"}  # where the config came from, not what a model computes with


def set_field(config: dict, field: str, value) -> None:
    nested = field in ROPE_FIELDS and "rope_parameters" in config
    (config["rope_parameters"] if nested else config)[field] = value


def test_the_bad_values_cover_every_field_the_models_read():
    from dataclasses import fields

    from mini_deepinfer.models.config import Qwen2Config, Qwen35Config

    assert set(QWEN3_5_BAD) == {f.name for f in fields(Qwen35Config)} - NOT_READ
    assert set(QWEN2_BAD) == {f.name for f in fields(Qwen2Config)} - NOT_READ


@pytest.mark.parametrize("family", ["qwen3.5", "qwen2"])
def test_every_field_the_models_read_is_refused_out_of_range_naming_config_json_and_the_field(
        family, tmp_path):
    from mini_deepinfer.models.loader import InvalidConfigError, parse_model_config

    good = json.loads((TRAINED / "config.json").read_text()) if family == "qwen3.5" else QWEN2
    parse_model_config(good, tmp_path)  # the unchanged file is accepted
    for field, values in (QWEN3_5_BAD if family == "qwen3.5" else QWEN2_BAD).items():
        for value in values:
            config = json.loads(json.dumps(good))
            set_field(config, field, value)
            with pytest.raises(InvalidConfigError) as info:
                parse_model_config(config, tmp_path)
            message = str(info.value)
            assert message.startswith(f"{tmp_path / 'config.json'}: ") and "\n" not in message, message
            assert field in message, (field, value, message)


def test_a_rotary_factor_past_one_is_refused_at_the_command_line_before_the_weights(tmp_path, capsys):
    folder = text_folder(tmp_path, "config.json",
                         lambda c: c["rope_parameters"].update(partial_rotary_factor=2.0))
    err = one_line(*run_main("mini_deepinfer.generate", ["--model", str(folder), "--prompt", "a", "--raw"],
                             capsys))
    assert f"{folder / 'config.json'}: partial_rotary_factor must be in (0, 1], got 2.0" in err, err


# -- 4: control characters in messages -----------------------------------------------------------------------

FORGED = "x\nerror: a forged second line\r\x1b[31mred"
ESCAPED = "x\\nerror: a forged second line\\r\\x1b[31mred"

# command -> arguments whose message names what the user gave ({d}: a folder that holds a file named FORGED)
FORGING = {
    "mini_deepinfer.generate": ["--model", "{d}/" + FORGED, "--prompt", "a", "--raw"],
    "mini_deepinfer.generate --prompt-file": ["--model", str(TRAINED), "--prompt-file",
                                              "{d}/missing/" + FORGED],
    "mini_deepinfer.random_checkpoint": ["--preset", "tiny", "{d}/" + FORGED],
    "mini_deepinfer.model_draft_demo": ["--write-draft", "{d}/" + FORGED, "{d}/" + FORGED],
    "mini_deepinfer.pipeline_demo": ["--kv-slots", "8", FORGED],
    "mini_deepinfer.__main__": ["--" + FORGED],
    "mini_deepinfer.bench.rounds": ["--output", "{d}/" + FORGED + "/run.json"],
    "mini_deepinfer.bench.speculative": ["--output", "{d}/" + FORGED + "/run.json"],
    "mini_deepinfer.bench.prefix": ["--output", "{d}/" + FORGED + "/run.json"],
    "mini_deepinfer.bench.__main__": ["--preset", "tiny", "--output", "{d}/" + FORGED + "/run.json"],
    "mini_deepinfer.bench.gpu": ["--dry-run", "--steps", FORGED],
}


@pytest.mark.parametrize("command", FORGING)
def test_a_newline_cr_or_ansi_escape_in_what_the_user_gave_is_escaped_in_every_command_s_message(
        command, tmp_path, capsys):
    (tmp_path / FORGED).write_text("a file, not a folder\n", encoding="utf-8")
    argv = [a.replace("{d}", str(tmp_path)) for a in FORGING[command]]
    err = one_line(*run_main(command.split()[0], argv, capsys))
    assert "\r" not in err and "\x1b" not in err, repr(err)
    assert ESCAPED in err, err


def test_printable_escapes_controls_and_keeps_every_other_character():
    from mini_deepinfer.tools.cli import printable

    assert printable("东方红 é\t\x00\x7f\x85\u2028") == "东方红 é\\t\\x00\\x7f\\x85\\u2028"
    assert printable(FORGED) == ESCAPED


# -- 5: options that mean something only with another --------------------------------------------------------

def parse(module: str, argv: list[str]):
    """Parse ``argv`` as ``module`` does, before it runs anything."""
    mod = importlib.import_module(module)
    return mod.parse_args(argv) if hasattr(mod, "parse_args") else mod.build_parser().parse_args(argv)


# Each command's table, the arguments it always needs, and a value for each flag that takes one.
NEEDS_COMMANDS = {
    "mini_deepinfer.generate": ["--model", "m", "--prompt", "a"],
    "mini_deepinfer.__main__": [],
    "mini_deepinfer.model_draft_demo": [],
    "mini_deepinfer.bench.__main__": ["--preset", "tiny"],
    "mini_deepinfer.bench.gpu": [],
}
VALUES = {"--draft-model": ["d"], "--draft-width": ["2"], "--prefix-block": ["16"], "--top-k": ["5"],
          "--top-p": ["0.5"], "--seed": ["3"], "--temperature": ["0.8"], "--cancel-after-round": ["2"],
          "--cancel": ["req-0"], "--noise": ["0.2"], "--write-draft": ["a", "b"], "--variant-batches": ["2"],
          "--variants": ["ours-graphs"], "--preset": ["tiny"], "--cpu-example": ["acceptance"],
          "--width": ["2"], "--output": ["o.json"], "--archive": ["a.tar.gz"], "--weights-dir": ["w"],
          "--steps": ["x"]}
TABLES = {module: importlib.import_module(module).FLAG_NEEDS for module in NEEDS_COMMANDS}
RULES = [(module, rule) for module, table in TABLES.items() for rule in table if hasattr(rule, "needs")]
UNUSED = [(module, rule) for module, table in TABLES.items() for rule in table if hasattr(rule, "other")]


def test_every_command_with_such_options_has_a_table_that_holds_the_known_ones():
    flags = {(module, rule.flag, getattr(rule, "needs", None) or rule.other)
             for module, table in TABLES.items() for rule in table}
    assert {("mini_deepinfer.generate", "--prefix-block", "--prefix-cache"),
            ("mini_deepinfer.generate", "--draft-width", "--speculative"),
            ("mini_deepinfer.generate", "--top-k", "--temperature"),
            ("mini_deepinfer.__main__", "--cancel-after-round", "--cancel"),
            ("mini_deepinfer.model_draft_demo", "--noise", "--write-draft"),
            ("mini_deepinfer.model_draft_demo", "--width", "--write-draft"),
            ("mini_deepinfer.bench.gpu", "--preset", "--check-only"),
            ("mini_deepinfer.bench.gpu", "--quick", "--check-only")} <= flags


def flag_value(flag: str) -> list[str]:
    return [flag, *VALUES.get(flag, [])]


@pytest.mark.parametrize(("module", "rule"), RULES, ids=[f"{m.split('.')[-1]} {r.flag}" for m, r in RULES])
def test_an_option_that_needs_another_is_refused_alone_and_accepted_with_it(module, rule):
    from mini_deepinfer.tools.cli import UsageError

    alone = [*NEEDS_COMMANDS[module], *flag_value(rule.flag)]
    with pytest.raises(UsageError) as info:
        parse(module, alone)
    message = str(info.value)
    assert message == rule.message() and rule.flag in message and rule.needs in message
    together = parse(module, [*alone, *flag_value(rule.needs)])
    assert getattr(together, rule.flag.lstrip("-").replace("-", "_")) not in (None, False)


@pytest.mark.parametrize(("module", "rule"), UNUSED, ids=[f"{m.split('.')[-1]} {r.flag}" for m, r in UNUSED])
def test_an_option_that_means_nothing_with_another_is_refused_with_it_and_accepted_alone(module, rule):
    from mini_deepinfer.tools.cli import UsageError

    alone = [*NEEDS_COMMANDS[module], *flag_value(rule.flag)]
    with pytest.raises(UsageError) as info:
        parse(module, [*alone, *flag_value(rule.other)])
    assert str(info.value) == rule.message() == f"{rule.flag} is not used with {rule.other}"
    assert getattr(parse(module, alone), rule.flag.lstrip("-").replace("-", "_")) not in (None, False)


@pytest.mark.parametrize("given", [["--prefix-block", "64"], ["--top-k", "0"], ["--seed", "0"]])
def test_an_option_given_its_default_value_without_what_it_needs_is_refused_too(given):
    from mini_deepinfer.tools.cli import UsageError

    with pytest.raises(UsageError, match=f"^{given[0]} is used only with "):
        parse("mini_deepinfer.generate", [*NEEDS_COMMANDS["mini_deepinfer.generate"], *given])


def test_prefix_block_without_prefix_cache_is_one_line_and_exit_2(capsys):
    err = one_line(*run_main("mini_deepinfer.generate", ["--model", str(TRAINED), "--prompt", "a",
                                                        "--prefix-block", "16"], capsys))
    assert err == "error: --prefix-block is used only with --prefix-cache\n"


# -- 6: benchmark sizes --------------------------------------------------------------------------------------

TRILLION = str(10**12)
SIZES = {  # (module, arguments, what the line must name); memory is patched to 4 GiB for the "memory" cases
    "prefix positions": ("mini_deepinfer.bench.prefix", ["--system-tokens", TRILLION], "--system-tokens"),
    "prefix memory": ("mini_deepinfer.bench.prefix", ["--system-tokens", "20000", "--preset", "qwen3.5-0.8b"],
                      "--system-tokens 20000"),
    "prefix new tokens": ("mini_deepinfer.bench.prefix", ["--new-tokens", TRILLION], "--new-tokens"),
    "rounds positions": ("mini_deepinfer.bench.rounds", ["--new-tokens", TRILLION], "--new-tokens"),
    "rounds memory": ("mini_deepinfer.bench.rounds", ["--requests", "100000"], "--requests 100000"),
    "speculative positions": ("mini_deepinfer.bench.speculative", ["--new-tokens", TRILLION], "--new-tokens"),
    "transformers prefill": ("mini_deepinfer.bench.__main__", ["--prefill", TRILLION], "--prefill"),
    "transformers batches": ("mini_deepinfer.bench.__main__", ["--batches", TRILLION], "--batches"),
    "transformers prompt": ("mini_deepinfer.bench.__main__", ["--prompt-len", TRILLION], "--prompt-len"),
    "transformers memory": ("mini_deepinfer.bench.__main__", ["--preset", "tiny", "--batches", "300000"],
                            "--batches 300000"),
    "transformers bandwidth": ("mini_deepinfer.bench.__main__", ["--bandwidth-mib", TRILLION],
                               "--bandwidth-mib"),
    "threads": ("mini_deepinfer.bench.rounds", ["--threads", TRILLION], "--threads"),
    "transformers threads": ("mini_deepinfer.bench.__main__", ["--threads", TRILLION], "--threads"),
}


@pytest.mark.parametrize("case", SIZES)
def test_a_benchmark_size_past_positions_or_memory_is_one_line_before_anything_is_allocated(
        case, monkeypatch, capsys):
    import mini_deepinfer.models as models
    import mini_deepinfer.tools.memory as memory

    def never(*args, **kwargs):
        raise AssertionError("a model was built before the sizes were checked")

    monkeypatch.setattr(memory, "device_memory", lambda device: (4 * 2**30, "of memory on this machine"))
    monkeypatch.setattr(models, "build_model", never)
    module, argv, named = SIZES[case]
    err = one_line(*run_main(module, argv, capsys))
    assert named in err, err


# -- 8: messages that say the wrong thing --------------------------------------------------------------------

def test_a_file_given_as_the_checkpoint_folder_is_called_a_file(tmp_path, capsys):
    from mini_deepinfer.runtime.text import TextError, load_text

    config = TRAINED / "config.json"
    for command, argv in (("mini_deepinfer.generate", ["--model", str(config), "--prompt", "a", "--raw"]),
                          ("mini_deepinfer.model_draft_demo",
                           ["--write-draft", str(config), str(tmp_path / "d")])):
        err = one_line(*run_main(command, argv, capsys))
        assert f"{config} is a file, not a checkpoint folder" in err and "not found" not in err, err
    with pytest.raises(TextError, match="is a file, not a checkpoint folder"):
        load_text(config)


def test_a_float8_weight_is_refused_naming_the_dtypes_the_loader_reads(tmp_path):
    import torch
    from safetensors.torch import save_file

    from mini_deepinfer.models.loader import DtypeMismatchError, index_tensors

    path = tmp_path / "model.safetensors"
    save_file({"model.embed_tokens.weight": torch.zeros(4, 4).to(torch.float8_e4m3fn)}, str(path))
    with pytest.raises(DtypeMismatchError) as info:
        index_tensors([path])
    message = str(info.value)
    assert "stored as F8_E4M3" in message and "F64, F32, F16, BF16" in message, message
    assert "a floating-point dtype" not in message, message
