"""``python -m mini_deepinfer.bench.gpu``: every accelerator measurement of the site, in one command.

Scope: on one GPU (or NPU), in this order, each step the same command a reader would type:

1. ``bench`` against transformers at the Qwen3.5-0.8B shape in bfloat16, eager and with graphs;
2. ``bench.rounds`` (synchronous vs cross-round, with a timeline of every round) on the ``small`` preset and
   on the 0.8B shape, eager and with graphs;
3. ``bench.speculative`` (what speculation costs on the device);
4. the no-stall check: steady decode rounds launched under ``torch.cuda.set_sync_debug_mode("error")``, which
   raises on any synchronising call (the read of the sampled tokens happens outside ``launch``), eager and
   with graphs, and graphs against eager in float32 (identical greedy tokens);
5. the three record commands of the records contribution page on random 2B and 0.8B checkpoints, with graphs.

Every step writes its JSON under ``--output-dir`` (``bench/`` and ``records/``, the layout of ``snippets/``)
and a ``manifest.json`` says what ran, how long each step took and what failed. A step that fails is
recorded and the next one runs. Weights are random (written by ``random_checkpoint``), and the records say so.
Non-scope: CPU runs (each benchmark has its own command), choosing what the site shows.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mini_deepinfer.tools.cli import OneLineParser, run_command

STEP_TIMEOUT_S = 240
PROMPTS = ["用两句话解释 KV Cache 的作用。", "What is 1 plus 1? Answer in one short sentence."]


def steps(device: str, weights: Path, out: Path) -> list[tuple[str, list[str]]]:
    """(name, argv after ``python -m``) of every measurement, in order."""
    kind = device.split(":")[0]
    dev = ["--device", device]
    two_b, small_b = str(weights / "Qwen3.5-2B"), str(weights / "Qwen3.5-0.8B")
    shared = ["--prompt", PROMPTS[0], "--prompt", PROMPTS[1], "--max-new-tokens", "128",
              "--cache-capacity", "512", "--max-num-seqs", "2", "--max-batched-tokens", "16",
              "--chunked-prefill", "--check-greedy", "--graphs"]
    bench, records = out / "bench", out / "records"
    return [
        ("checkpoint 2B", ["mini_deepinfer.random_checkpoint", "--preset", "qwen3.5-2b", "--force", two_b]),
        ("checkpoint 0.8B", ["mini_deepinfer.random_checkpoint", "--preset", "qwen3.5-0.8b", "--force",
                             small_b]),
        ("bench eager", ["mini_deepinfer.bench", *dev, "--dtype", "bfloat16", "--repeats", "2", "--eager",
                         "--output", str(bench / f"{kind}-bf16-qwen3.5-0.8b-eager.json")]),
        ("bench graphs", ["mini_deepinfer.bench", *dev, "--dtype", "bfloat16", "--repeats", "2", "--graphs",
                          "--output", str(bench / f"{kind}-bf16-qwen3.5-0.8b-graphs.json")]),
        *[(f"rounds {preset} {mode}",
           ["mini_deepinfer.bench.rounds", *dev, "--dtype", "bfloat16", "--preset", preset, "--repeats", "5",
            f"--{mode}", "--output", str(bench / f"rounds-{kind}-{preset}-{mode}.json")])
          for preset in ("small", "qwen3.5-0.8b") for mode in ("eager", "graphs")],
        ("speculative", ["mini_deepinfer.bench.speculative", *dev, "--dtype", "bfloat16",
                         "--output", str(bench / f"speculative-{kind}.json")]),
        ("no-stall check", ["mini_deepinfer.bench.gpu", "--check-only", *dev,
                            "--output-dir", str(out)]),
        ("record batched", ["mini_deepinfer.generate", "--model", two_b, *dev, "--dtype", "float32", *shared,
                            "--output", str(records / f"{kind}-generate-batched-graphs.json")]),
        ("record cross-round", ["mini_deepinfer.generate", "--model", two_b, *dev, "--dtype", "float32",
                                *shared, "--pipeline", "--stagger-prompts",
                                "--output", str(records / f"{kind}-generate-cross-round-graphs.json")]),
        ("record speculative", ["mini_deepinfer.generate", "--model", two_b, "--draft-model", small_b,
                                "--speculative", *dev, "--dtype", "float32", "--prompt",
                                "The capital of France is", "--raw", "--max-new-tokens", "10",
                                "--cache-capacity", "128", "--draft-width", "3", "--stream",
                                "--cancel-after-tokens", "2", "--check-greedy",
                                "--output", str(records / f"{kind}-stream-cancel.json")]),
    ]


def run_steps(device: str, out: Path) -> dict:
    """Run every step, each in its own process; return the manifest."""
    (out / "bench").mkdir(parents=True, exist_ok=True)
    (out / "records").mkdir(parents=True, exist_ok=True)
    manifest = {"device": device, "steps": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in steps(device, Path(tmp) / "weights", out):
            start = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                                      timeout=STEP_TIMEOUT_S)
                code, tail = proc.returncode, (proc.stdout + proc.stderr)[-2000:]
            except subprocess.TimeoutExpired:
                code, tail = None, f"timed out after {STEP_TIMEOUT_S} s"
            seconds = round(time.perf_counter() - start, 1)
            manifest["steps"].append({"step": name, "command": ["python", "-m", *argv], "exit_code": code,
                                      "seconds": seconds, "output_tail": tail})
            print(f"{name}: exit {code} in {seconds} s", flush=True)
    return manifest


# --8<-- [start:no_stall]
def launches_without_sync(device: str, graphs: bool, rounds: int = 24) -> dict:
    """Steady decode rounds whose ``launch`` runs under ``set_sync_debug_mode("error")``: any synchronising
    call in it raises. ``read`` (the one documented wait for the sampled tokens) runs outside."""
    import torch

    from mini_deepinfer.core.engine import EngineConfig
    from mini_deepinfer.core.request import SamplingParams
    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.runtime.factory import build_engine

    model = build_model(qwen3_5_config("small"), torch.bfloat16, device, seed=0)
    config = EngineConfig(kv_capacity=1024, max_num_seqs=4, max_batched_tokens=256, pipeline=True)
    engine = build_engine(model, config, graphs=graphs)
    for i in range(4):
        engine.submit(f"r{i}", list(range(5, 21 + 8 * i)), SamplingParams(max_new_tokens=rounds + 8))
    for _ in range(4):  # prefill, and each bucket's first round (its capture) outside the check
        engine.step()
    launch = engine.runner.launch

    def checked_launch(plan):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return launch(plan)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    engine.runner.launch = checked_launch
    try:
        for _ in range(rounds):
            engine.step()
        error = None
    except Exception as exc:  # noqa: BLE001 - the check reports whatever the launch raised
        error = f"{type(exc).__name__}: {exc}"[:500]
    return {"graphs": graphs, "rounds_checked": rounds, "passed": error is None, "error": error,
            "runner_rounds": dict(engine.runner.rounds_by_mode)}
# --8<-- [end:no_stall]


def graphs_equal_eager(device: str) -> dict:
    """Float32, greedy: the tokens with graphs equal the tokens without, request by request."""
    import torch

    from mini_deepinfer.core.engine import EngineConfig
    from mini_deepinfer.core.request import SamplingParams
    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.runtime.factory import build_engine

    model = build_model(qwen3_5_config("small", initializer_range=0.1), torch.float32, device, seed=0)
    outputs = {}
    for graphs in (False, True):
        config = EngineConfig(kv_capacity=1024, max_num_seqs=4, max_batched_tokens=64, chunked_prefill=True,
                              pipeline=True)
        engine = build_engine(model, config, graphs=graphs)
        for i in range(4):
            engine.submit(f"r{i}", list(range(3 + i, 40 + 9 * i)), SamplingParams(max_new_tokens=48))
        engine.run()
        outputs[graphs] = {rid: r.output_token_ids for rid, r in engine.requests.items()}
    compared = sum(map(len, outputs[False].values()))
    return {"passed": outputs[True] == outputs[False], "tokens_compared": compared}


def check_only(device: str, out: Path) -> int:
    import torch

    from mini_deepinfer.runtime.device import resolve_device

    resolve_device(device)
    if torch.device(device).type != "cuda":
        raise ValueError("the no-stall check uses torch.cuda.set_sync_debug_mode: it needs a cuda device")
    result = {"no_stall": [launches_without_sync(device, g) for g in (False, True)],
              "graphs_equal_eager": graphs_equal_eager(device)}
    (out / "bench").mkdir(parents=True, exist_ok=True)
    (out / "bench" / "no-stall-cuda.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    passed = all(r["passed"] for r in result["no_stall"]) and result["graphs_equal_eager"]["passed"]
    return 0 if passed else 1


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m mini_deepinfer.bench.gpu",
                      description="Run every accelerator measurement of the site and write the JSON files.")
    p.add_argument("--device", default="cuda:0", help="cuda[:N] or npu[:N] (default cuda:0)")
    p.add_argument("--output-dir", type=Path, default=Path("gpu-results"),
                   help="where bench/, records/ and manifest.json go (default gpu-results)")
    p.add_argument("--check-only", action="store_true", help="only the no-stall and graphs-vs-eager checks")
    return p


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.check_only:
        return check_only(args.device, args.output_dir)
    from mini_deepinfer.runtime.device import resolve_device

    if resolve_device(args.device).type == "cpu":  # one line, before anything runs
        raise ValueError("bench.gpu measures an accelerator: use --device cuda[:N] or npu[:N]")
    manifest = run_steps(args.device, args.output_dir)
    (args.output_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")
    return 0 if all(s["exit_code"] == 0 for s in manifest["steps"]) else 1


def main(argv: list[str] | None = None) -> int:
    return run_command(run, argv, errors=(ValueError, OSError))  # OSError: an unusable --output-dir


if __name__ == "__main__":
    sys.exit(main())
