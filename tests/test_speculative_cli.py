"""The two-model command lines: ``generate --speculative`` on a random tiny checkpoint, and the CPU demo."""

from __future__ import annotations

import json
import re
import shutil

import pytest

import mini_deepinfer.model_draft_demo as model_draft_demo
from mini_deepinfer.generate import main
from mini_deepinfer.tools.checkpoints import write_perturbed_checkpoint


@pytest.fixture(scope="module")
def draft_checkpoint(tiny_checkpoint, tmp_path_factory):
    folder = tmp_path_factory.mktemp("draft") / "tiny-draft"
    write_perturbed_checkpoint(tiny_checkpoint, folder, noise=0.3, seed=0)
    return folder


def generate(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def spec_args(target, draft, *extra) -> list:
    return ["--model", target, "--draft-model", draft, "--speculative",
            "--prompt", "The capital of France is", "--raw", "--max-new-tokens", "10",
            "--cache-capacity", "128", *extra]


def test_speculative_generate_records_both_models_groups_caches_and_the_greedy_check(
        tiny_checkpoint, draft_checkpoint, capsys, tmp_path):
    out_file = tmp_path / "run.json"
    code, out, err = generate(capsys, *spec_args(tiny_checkpoint, draft_checkpoint, "--draft-width", "3",
                                                 "--check-greedy", "--output", out_file))
    assert code == 0, err
    assert "free KV slots 128/128; draft free KV slots 128/128]" in out
    record = json.loads(out_file.read_text(encoding="utf-8"))
    (request,) = record["requests"]
    assert [t for g in request["committed_groups"] for t in g] == request["output_token_ids"]
    assert max(len(g) for g in request["committed_groups"]) <= 4
    assert record["draft_model"]["path"] == str(draft_checkpoint)
    assert record["cache"]["draft"]["kv"] == {"capacity": 128, "free": 128}
    assert record["checks"]["check_greedy"] == {
        "compared_tokens": 10, "passed": True, "differing_requests": [],
        "note": "only the delivered prefix is compared"}
    assert record["config"]["speculative"] is True and record["config"]["draft_width"] == 3


def test_stream_cancel_stops_at_a_group_boundary_and_both_caches_return_every_slot(
        tiny_checkpoint, draft_checkpoint, capsys, tmp_path):
    out_file = tmp_path / "run.json"
    code, out, _ = generate(capsys, *spec_args(tiny_checkpoint, draft_checkpoint, "--stream",
                                               "--cancel-after-tokens", "2", "--check-greedy",
                                               "--output", out_file))
    assert code == 0
    (request,) = json.loads(out_file.read_text(encoding="utf-8"))["requests"]
    groups = request["committed_groups"]
    assert request["finish_reason"] == "cancelled"
    # the group that reached 2 tokens is delivered whole
    assert sum(len(g) for g in groups[:-1]) < 2 <= sum(len(g) for g in groups)
    n = len(request["output_token_ids"])
    assert f"[cancelled; {n} output tokens; free KV slots 128/128; draft free KV slots 128/128]" in out


def trace_counts(out: str) -> dict[str, int]:
    """Verify rounds, drafts and accepted drafts as the ``--trace-rounds`` verify lines show them, and the
    drafts the commit lines of those rounds deliver (each group less its one bonus or corrected token)."""
    verified = {m.group(1, 2): (json.loads(m.group(3)), int(m.group(4))) for m in re.finditer(
        r"^\[round (\d+)\] verify   (\S+) drafts=(\[.*?\]) accepted=(\d+)", out, re.MULTILINE)}
    delivered = [len(json.loads(m.group(3))) - 1 for m in re.finditer(
        r"^\[round (\d+)\] commit   (\S+) \+(\[.*?\])", out, re.MULTILINE) if m.group(1, 2) in verified]
    return {"verify_rounds": len(verified), "drafts_proposed": sum(len(d) for d, _ in verified.values()),
            "drafts_accepted": sum(a for _, a in verified.values()), "delivered_drafts": sum(delivered)}


@pytest.mark.parametrize("sampling", [[], ["--temperature", "0.8", "--seed", "3"]], ids=["greedy", "sampled"])
def test_record_and_footer_give_the_drafts_accepted_per_verify_round_that_the_trace_shows(
        tiny_checkpoint, draft_checkpoint, capsys, tmp_path, sampling):
    out_file = tmp_path / "run.json"
    code, out, err = generate(capsys, *spec_args(tiny_checkpoint, draft_checkpoint, "--draft-width", "3",
                                                 "--prompt", "What is 1 plus 1?", "--ignore-eos",
                                                 "--trace-rounds", "--output", out_file, *sampling))
    assert code == 0, err
    counts = json.loads(out_file.read_text(encoding="utf-8"))["speculative"]
    seen = trace_counts(out)
    assert {key: counts[key] for key in ("verify_rounds", "drafts_proposed", "drafts_accepted")} == {
        key: seen[key] for key in ("verify_rounds", "drafts_proposed", "drafts_accepted")}
    assert seen["delivered_drafts"] == counts["drafts_accepted"], "the bonus or corrected token is no draft"
    assert 0 < counts["drafts_accepted"] < counts["drafts_proposed"], "some drafts are rejected"
    assert counts["accepted_per_round"] == counts["drafts_accepted"] / counts["verify_rounds"]
    assert counts["acceptance_rate"] == counts["drafts_accepted"] / counts["drafts_proposed"]
    line = (f"[speculative: {counts['verify_rounds']} verify rounds, {counts['drafts_accepted']} of "
            f"{counts['drafts_proposed']} drafts accepted ({round(100 * counts['acceptance_rate'])}%), "
            f"{counts['accepted_per_round']:.2f} accepted per round]\n")
    assert out.endswith(line)


def test_a_run_without_a_verify_round_says_so_and_records_no_figure(
        tiny_checkpoint, draft_checkpoint, capsys, tmp_path):
    out_file = tmp_path / "run.json"
    code, out, err = generate(capsys, *spec_args(tiny_checkpoint, draft_checkpoint, "--max-new-tokens", "1",
                                                 "--output", out_file))
    assert code == 0, err
    assert out.endswith("[speculative: no verify round ran, no draft was proposed]\n")
    assert json.loads(out_file.read_text(encoding="utf-8"))["speculative"] == {
        "verify_rounds": 0, "drafts_proposed": 0, "drafts_accepted": 0, "accepted_per_round": None,
        "acceptance_rate": None}


@pytest.mark.parametrize("width", ["0", "17", "-1"])
def test_draft_width_outside_1_to_16_says_the_range_help_gives_before_loading(capsys, width):
    code, out, err = generate(capsys, "--model", "x", "--draft-model", "y", "--speculative", "--prompt", "a",
                              "--draft-width", width)
    assert code == 2 and not out
    assert err == f"error: --draft-width must be an integer in 1..16, got {width}\n"
    assert "1..16" in generate_help(capsys)


def generate_help(capsys) -> str:
    with pytest.raises(SystemExit):
        generate(capsys, "--help")
    return capsys.readouterr().out


@pytest.mark.parametrize("flags", [["--speculative", "--draft-model", "y"], ["--temperature", "0.7"]])
def test_graphs_where_no_round_could_run_as_a_graph_is_refused_and_help_says_so(capsys, flags):
    code, out, err = generate(capsys, "--model", "x", "--prompt", "a", "--graphs", *flags)
    assert code == 2 and not out and err.count("\n") == 1 and "drop --graphs" in err
    assert "refused with --speculative or --temperature > 0" in " ".join(generate_help(capsys).split())


def test_the_record_of_a_speculative_run_says_its_rounds_ran_eagerly(tiny_checkpoint, draft_checkpoint,
                                                                      capsys, tmp_path):
    out_file = tmp_path / "spec.json"
    code, _, err = generate(capsys, *spec_args(tiny_checkpoint, draft_checkpoint), "--output", str(out_file))
    assert code == 0, err
    execution = json.loads(out_file.read_text(encoding="utf-8"))["execution"]
    assert execution["graphs"] is False and execution["rounds"]["eager"] > 0


@pytest.mark.parametrize(("flags", "message"), [
    (["--speculative"], "--speculative needs --draft-model"),
    (["--draft-model", "y"], "used only with --speculative"),
    (["--speculative", "--draft-model", "y", "--pipeline"], "--pipeline cannot be combined with speculative"),
    (["--check-greedy", "--temperature", "0.7"], "cannot be combined with sampling"),
])
def test_inconsistent_two_model_flags_are_refused_before_loading(capsys, flags, message):
    code, _, err = generate(capsys, "--model", "x", "--prompt", "a", *flags)
    assert code == 2 and message in err and err.count("\n") == 1


def test_a_draft_with_another_tokenizer_is_refused(tiny_checkpoint, draft_checkpoint, capsys, tmp_path):
    other = tmp_path / "other-draft"
    shutil.copytree(draft_checkpoint, other)
    tokenizer = json.loads((other / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    vocab["!"], vocab['"'] = vocab['"'], vocab["!"]  # the same size, two ids swapped
    (other / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    code, _, err = generate(capsys, *spec_args(tiny_checkpoint, other))
    assert code == 2 and "tokenizer" in err and "differs" in err


def test_demo_rejection_example_restores_the_draft_from_6_to_4_and_tops_up_to_5(capsys, tmp_path):
    out_file = tmp_path / "rejection.json"
    assert model_draft_demo.main(["--cpu-example", "rejection", "--trace-rounds", "--width", "3",
                                  "--output", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "draft cache: computed 6 -> keep 4" in out and "next round tops up to 5" in out
    assert "all 3 accepted + bonus" in out and "2 accepted + correction" in out
    record = json.loads(out_file.read_text(encoding="utf-8"))
    assert record["checks"]["check_greedy"]["passed"] and record["checks"]["cold_cache"]["passed"]
    assert record["cache"]["target"] == record["cache"]["draft"] == {
        "kv": {"capacity": 16, "free": 16}, "state": {"capacity": 1, "free": 1}}


@pytest.mark.parametrize(("width", "message"), [
    ("0", "--width must be an integer in 1..16, got 0"),
    ("17", "--width must be an integer in 1..16, got 17"),
])
def test_demo_width_outside_1_to_16_is_a_one_line_error(capsys, width, message):
    assert model_draft_demo.main(["--width", width]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {message}\n" and captured.out == ""


def test_demo_output_runs_the_greedy_check_once(capsys, tmp_path, monkeypatch):
    from mini_deepinfer.tools import checks

    calls = []
    real = checks.check_greedy
    monkeypatch.setattr(checks, "check_greedy", lambda *a: calls.append(1) or real(*a))
    out_file = tmp_path / "run.json"
    assert model_draft_demo.main(["--output", str(out_file)]) == 0
    assert "Greedy check: 12 tokens equal" in capsys.readouterr().out
    assert len(calls) == 1
    assert json.loads(out_file.read_text(encoding="utf-8"))["checks"]["check_greedy"]["passed"]


def folder_digest(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_write_draft_never_writes_into_or_around_its_source(tiny_checkpoint, capsys, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(tiny_checkpoint, source)
    before = folder_digest(source)
    for target, relation in ((source, "is"), (source / ".", "is"), (source / "draft", "is inside"),
                             (tmp_path, "holds")):
        code = model_draft_demo.main(["--write-draft", str(source), str(target), "--force"])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == "", target
        assert f" {relation} TARGET_DIR " in captured.err and captured.err.count("\n") == 1, captured.err
    assert folder_digest(source) == before


def test_the_smallest_temperature_gives_the_greedy_tokens_on_both_paths(tiny_checkpoint, draft_checkpoint,
                                                                          capsys, tmp_path):
    """1e-5 is accepted and divides the logits as documented: the distribution is all but one-hot, so the
    draw is the argmax, on the plain path and through speculative verification alike."""
    outputs = {}
    for name, extra in (("greedy", []), ("plain", ["--temperature", "1e-5", "--seed", "0"]),
                        ("speculative", ["--temperature", "1e-5", "--seed", "0", "--speculative",
                                         "--draft-model", draft_checkpoint])):
        out_file = tmp_path / f"{name}.json"
        code, _, err = generate(capsys, "--model", tiny_checkpoint, "--prompt", "The capital of France is",
                                "--raw", "--max-new-tokens", "10", "--cache-capacity", "128", *extra,
                                "--output", out_file)
        assert code == 0, err
        outputs[name] = json.loads(out_file.read_text(encoding="utf-8"))["requests"][0]["output_token_ids"]
    assert outputs["plain"] == outputs["speculative"] == outputs["greedy"]
