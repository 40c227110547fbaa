"""The numbers of the BF16 notes: what running Qwen3.5 in bfloat16 or float16 changes against float32.

Scope: one small random Qwen3.5 built in code (fixed seeds, float32 reference weights cast to each dtype, the
way the loader casts a checkpoint) and four random prompts. For each dtype it measures, on the CPU with one
thread: the largest logit difference to float32 on the same tokens, how often the next-token argmax still
agrees, chunked against whole prefill within the dtype, and greedy generation through the engine (against
float32, and chunked against whole prefill). It also lists the dtypes of the hybrid cache's tensors and reads
the tolerances the parity tests use out of their source, so the page cannot drift from them. The
half-precision digits depend on the CPU's kernels: ``kernels.txt`` names them, and on a CPU with other
kernels ``--check`` checks the pages' statements (:func:`claims_failing_here`) instead of the digits.
Non-scope: explaining the numbers (the pages do), real weights, accelerators.
"""

from __future__ import annotations

import ast
import functools
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.models import Qwen35Config, build_model
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.layers import CausalLM
from mini_deepinfer.runtime.factory import new_cache
from mini_deepinfer.runtime.model_runner import ModelRunner
from mini_deepinfer.runtime.staging import batch_from_sequences
from site_scripts.build.common import ROOT, GeneratorError, MachineDependent

CONFIG = Qwen35Config(
    vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=8, num_attention_heads=4,
    num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=32, linear_value_head_dim=32, initializer_range=0.02,
)
MODEL_SEED = 0
PROMPT_SEED = 1
PROMPT_LENS = (100, 37, 9, 64)
NEW_TOKENS = 48
CHUNK_SIZES = (1, 7, 16, 64)  # prefill chunk sizes compared with whole prefill (1 = token by token)
ENGINE_BUDGET = 7  # token budget per round of the engine's chunked-prefill run
CAPACITY = 1024
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
T = TypeVar("T")

# (test file, test function): the parity tests whose bounds the page lists
PARITY, MODES = "tests/test_qwen3_5_parity.py", "tests/test_engine_modes_qwen.py"
TOLERANCE_TESTS = (
    (PARITY, "test_full_sequence_logits_match_transformers"),
    (PARITY, "test_chunked_prefill_equals_whole_prefill"),
    (MODES, "test_every_mode_gives_the_tokens_and_logits_of_each_request_alone"),
    (MODES, "test_cross_round_and_synchronous_logits_agree_on_more_than_40_rounds"),
    (PARITY, "test_half_precision_runs_close_to_transformers"),
)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def one_thread(function: Callable[[], T]) -> Callable[[], T]:
    """Run ``function`` on one CPU thread (a fixed order of float sums, hence fixed digits), then restore."""

    @functools.wraps(function)
    def run() -> T:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return function()
        finally:
            torch.set_num_threads(threads)

    return run


@functools.cache
def reference_model() -> CausalLM:
    return build_model(CONFIG, torch.float32, "cpu", seed=MODEL_SEED)


@functools.cache
def model_in(dtype: torch.dtype) -> CausalLM:
    """The reference weights cast to ``dtype`` (as ``load_checkpoint(..., dtype)`` casts a checkpoint)."""
    if dtype == torch.float32:
        return reference_model()
    model = build_model(CONFIG, dtype, "cpu")
    model.load_state_dict(reference_model().state_dict())
    return model


@functools.cache
def prompts() -> tuple[tuple[int, ...], ...]:
    generator = torch.Generator().manual_seed(PROMPT_SEED)
    return tuple(tuple(torch.randint(0, CONFIG.vocab_size, (n,), generator=generator).tolist())
                 for n in PROMPT_LENS)


@functools.cache
def greedy(dtype: torch.dtype, chunked: bool) -> tuple[tuple[int, ...], ...]:
    """Greedy outputs of every prompt, all submitted at once to a batching engine."""
    model = model_in(dtype)
    runner = ModelRunner(model, new_cache(model, CAPACITY, len(PROMPT_LENS)))
    budget = ENGINE_BUDGET if chunked else sum(PROMPT_LENS)
    engine = BatchEngine(runner, EngineConfig(kv_capacity=CAPACITY, state_capacity=len(PROMPT_LENS),
                                              max_num_seqs=len(PROMPT_LENS), max_batched_tokens=budget,
                                              chunked_prefill=chunked))
    for i, prompt in enumerate(prompts()):
        engine.submit(f"p{i}", list(prompt), SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    engine.run()
    return tuple(tuple(engine.requests[f"p{i}"].output_token_ids) for i in range(len(PROMPT_LENS)))


def forced_sequences() -> list[list[int]]:
    """Each prompt followed by float32's greedy output: the same tokens for every dtype."""
    return [list(p) + list(out)[:-1] for p, out in zip(prompts(), greedy(torch.float32, chunked=False))]


def run_logits(model: CausalLM, tokens: list[int], chunk: int | None) -> torch.Tensor:
    """float32 logits ``[len(tokens), vocab]`` for every position, in one forward or in chunks."""
    dtype = model.lm_head.weight.dtype
    cache = HybridCache(CONFIG, len(tokens), 1, dtype, "cpu")
    slots = list(range(len(tokens)))
    step = chunk or len(tokens)
    rows = []
    for start in range(0, len(tokens), step):
        piece = tokens[start : start + step]
        batch = batch_from_sequences([piece], [start], [slots], [0], all_logits=True)
        rows.append(model(batch, cache).float())
    return torch.cat(rows)


@functools.cache
def logits(dtype: torch.dtype, chunk: int | None = None) -> tuple[torch.Tensor, ...]:
    """Logits of every forced sequence, whole (``chunk=None``) or in chunks of ``chunk`` tokens."""
    model = model_in(dtype)
    return tuple(run_logits(model, seq, chunk) for seq in forced_sequences())


def max_abs_diff(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


@dataclass(frozen=True)
class Row:
    """One dtype's measurements against float32."""

    dtype: torch.dtype
    diff_vs_fp32: float
    relative: float
    argmax_same: int
    positions: int
    widest_flipped_gap: float | None
    greedy_prefix: int
    first_divergence: list[int | None]
    chunked_greedy_same: int


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (None if the sequences are equal)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def top2_gaps(ref: Sequence[torch.Tensor], got: Sequence[torch.Tensor]) -> list[float]:
    """float32's gap between its two largest logits, at each position where the two argmaxes differ."""
    gaps = []
    for x, y in zip(ref, got):
        top = x.topk(2, dim=-1).values
        flipped = x.argmax(-1) != y.argmax(-1)
        gaps += (top[:, 0] - top[:, 1])[flipped].tolist()
    return gaps


@functools.cache
def measure(dtype: torch.dtype) -> Row:
    ref, got = logits(torch.float32), logits(dtype)
    diff = max_abs_diff(ref, got)
    scale = max(float(x.abs().max()) for x in ref)
    gaps = top2_gaps(ref, got)
    ref_tokens, tokens = greedy(torch.float32, False), greedy(dtype, False)
    divergence = [first_divergence(a, b) for a, b in zip(ref_tokens, tokens)]
    return Row(
        dtype=dtype,
        diff_vs_fp32=diff,
        relative=diff / scale,
        argmax_same=sum(len(x) for x in ref) - len(gaps),
        positions=sum(len(x) for x in ref),
        widest_flipped_gap=max(gaps) if gaps else None,
        greedy_prefix=sum(NEW_TOKENS if d is None else d for d in divergence),
        first_divergence=divergence,
        chunked_greedy_same=sum(a == b for a, b in zip(tokens, greedy(dtype, True))),
    )


def _sci(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def table_row(row: Row) -> str:
    same = row.dtype == torch.float32
    divergence = ", ".join("—" if d is None else str(d) for d in row.first_divergence)
    cells = [
        f"`{dtype_name(row.dtype)}`",
        "—" if same else _sci(row.diff_vs_fp32),
        "—" if same else f"{row.relative:.2%}",
        "—" if same else f"{row.argmax_same}/{row.positions}",
        "—" if row.widest_flipped_gap is None else _sci(row.widest_flipped_gap),
        "—" if same else f"{row.greedy_prefix}/{NEW_TOKENS * len(PROMPT_LENS)} ({divergence})",
        f"{row.chunked_greedy_same}/{len(PROMPT_LENS)}",
    ]
    return "| " + " | ".join(cells) + " |"


def table() -> str:
    """Body rows of the measurement table, one per dtype (the pages write the header)."""
    return "\n".join(table_row(measure(dtype)) for dtype in DTYPES) + "\n"


def chunks_table() -> str:
    """Body rows of the chunked-prefill table: one per chunk size, max abs logit difference per dtype."""
    rows = []
    for size in CHUNK_SIZES:
        cells = [_sci(max_abs_diff(logits(dtype), logits(dtype, size))) for dtype in DTYPES]
        rows.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def setup() -> str:
    """What was measured, as the text block above the table."""
    kinds = CONFIG.layer_types
    return (
        f"model     random Qwen3.5 (seed {MODEL_SEED}, initializer_range {CONFIG.initializer_range}): "
        f"vocab {CONFIG.vocab_size}, hidden {CONFIG.hidden_size},\n"
        f"          {len(kinds)} layers ({kinds.count('linear_attention')} Gated DeltaNet, "
        f"{kinds.count('full_attention')} gated attention)\n"
        f"weights   float32, cast to bfloat16 / float16\n"
        f"prompts   {len(PROMPT_LENS)} random prompts (seed {PROMPT_SEED}) of "
        f"{', '.join(map(str, PROMPT_LENS))} tokens, {NEW_TOKENS} greedy tokens each\n"
        f"logits    every position of prompt + float32's greedy output, compared as float32\n"
        f"chunks    logits: chunks of {', '.join(map(str, CHUNK_SIZES))} tokens against one whole forward\n"
        f"          engine: chunked prefill with a budget of {ENGINE_BUDGET} tokens per round\n"
        f"device    CPU, one thread\n"
    )


def kernels() -> str:
    """The line naming what the half-precision digits depend on: the CPU's vector kernels and torch's version.

    ATen picks its elementwise and reduction kernels by the CPU's vector instructions, and a half-precision
    matrix product goes to oneDNN only on CPUs with native bfloat16 / float16 instructions; either changes the
    order of the sums, hence the last digits. The two ``mkldnn`` ops are private: no public API says which
    kernel a half-precision matmul gets.
    """
    native = [name for name, supported in (
        ("bfloat16", torch.ops.mkldnn._is_mkldnn_bf16_supported()),
        ("float16", torch.ops.mkldnn._is_mkldnn_fp16_supported()),
    ) if supported]
    return (f"kernels   {platform.machine()}, ATen {torch.backends.cpu.get_cpu_capability()}, oneDNN "
            f"half-precision matmul: {', '.join(native) or 'none'}; torch {torch.__version__}\n")


def claims_failing_here() -> list[str]:
    """The pages' statements about the two tables, checked on this machine's numbers: those that fail."""
    fp32, bf16, fp16 = (measure(dtype) for dtype in DTYPES)

    def chunk_diff(dtype: torch.dtype, size: int) -> float:
        return max_abs_diff(logits(dtype), logits(dtype, size))

    (shown_bound,) = bounds(PARITY, "test_chunked_prefill_equals_whole_prefill")  # "< 1e-5"
    fp32_chunk_bound = float(shown_bound.removeprefix("< "))

    holds = {
        "bfloat16 moves the logits more than float16": bf16.diff_vs_fp32 > fp16.diff_vs_fp32,
        "the logits move by a small fraction (under 5%) of their scale":
            max(bf16.relative, fp16.relative) < 0.05,
        "an argmax flips only where float32's two best logits are closer than twice the largest difference":
            all(r.widest_flipped_gap is None or r.widest_flipped_gap < 2 * r.diff_vs_fp32
                for r in (bf16, fp16)),
        f"in float32, chunked and whole prefill differ only by float32 rounding ({shown_bound}, the parity "
        "test's bound)": all(chunk_diff(torch.float32, size) < fp32_chunk_bound for size in CHUNK_SIZES),
        "in float32, chunked prefill gives the greedy tokens of whole prefill":
            fp32.chunked_greedy_same == len(PROMPT_LENS),
        "token-by-token bfloat16 differs from whole prefill about as much (at least a quarter as much) as "
        "bfloat16 from float32": chunk_diff(torch.bfloat16, 1) >= bf16.diff_vs_fp32 / 4,
    }
    return [claim for claim, held in holds.items() if not held]


def cache_listing() -> str:
    """The tensors of a HybridCache for the bfloat16 model: one layer of each kind."""
    cache = HybridCache(CONFIG, 8, 2, torch.bfloat16, "cpu")
    linear, full = CONFIG.linear_attention_layers[0], CONFIG.full_attention_layers[0]
    tensors = [
        (full, "full_attention", "key_cache", cache.key_cache[full]),
        (full, "full_attention", "value_cache", cache.value_cache[full]),
        (linear, "linear_attention", "conv_state", cache.conv_state[linear]),
        (linear, "linear_attention", "recurrent_state", cache.recurrent_state[linear]),
    ]
    lines = ["HybridCache(config, kv_capacity=8, state_capacity=2, dtype=torch.bfloat16)"]
    for layer, kind, name, t in tensors:
        lines.append(f"  layer {layer} {kind:<16} {name:<15} {dtype_name(t.dtype):<8} {list(t.shape)}")
    return "\n".join(lines) + "\n"


BOUND_OPS = {ast.Lt: "<", ast.LtE: "<="}


def _constants(source: str, tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = <number>`` assignments: name -> the number as written."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = ast.get_source_segment(source, node.value) or ""
    return found


def bounds(path: str, function: str) -> list[str]:
    """The bounds a test asserts: ``< x`` / ``<= x`` comparisons and ``atol=`` / ``rtol=`` arguments."""
    source = (ROOT / path).read_text(encoding="utf-8")
    tree = ast.parse(source)
    constants = _constants(source, tree)
    test = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if test is None:
        raise GeneratorError(f"{path}: no test {function}")

    def shown(node: ast.expr) -> str:
        text = ast.get_source_segment(source, node) or ast.unparse(node)
        return constants.get(text, text)

    found = []
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in BOUND_OPS:
            found.append(f"{BOUND_OPS[type(node.ops[0])]} {shown(node.comparators[0])}")
        elif isinstance(node, ast.keyword) and node.arg in ("atol", "rtol"):
            found.append(f"{node.arg}={shown(node.value)}")
    if not found:
        raise GeneratorError(f"{path}::{function} asserts no bound")
    return list(dict.fromkeys(found))


def tolerances() -> str:
    """Body rows of the table of parity-test bounds (the pages write the header)."""
    rows = []
    for path, function in TOLERANCE_TESTS:
        shown = ", ".join(f"`{b}`" for b in bounds(path, function))
        rows.append(f"| `{function}` | `{path}` | {shown} |")
    return "\n".join(rows) + "\n"


OUTPUTS: dict[str, Callable[[], str]] = {
    "bf16/setup.txt": setup,
    "bf16/kernels.txt": kernels,
    "bf16/table.md": one_thread(table),
    "bf16/chunks.md": one_thread(chunks_table),
    "bf16/cache.txt": cache_listing,
    "bf16/tolerances.md": tolerances,
}

MACHINE_DEPENDENT = MachineDependent(
    record="bf16/kernels.txt",
    outputs=("bf16/table.md", "bf16/chunks.md"),
    claims=one_thread(claims_failing_here),
)
