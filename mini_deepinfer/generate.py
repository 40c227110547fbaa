"""``python -m mini_deepinfer.generate``: text in, text out, through the same engine loop as the toy.

Scope: the command line for one local checkpoint: load it (``--model``, ``--device``, ``--dtype``), turn
prompts into token ids (chat template unless ``--raw``), run them through a ``BatchEngine`` (budget, chunking,
staggered arrival, cross-round ``--pipeline``), print or stream the text, cancel after N tokens, and write a
run record (``--output``). With ``--speculative`` a second, smaller checkpoint (``--draft-model``) proposes
``--draft-width`` tokens per round and the model verifies them; tokens are then delivered in groups, a last
line gives the drafts accepted per verify round and the acceptance rate, and ``--check-greedy`` compares the
tokens with a plain greedy run. With ``--prefix-cache`` a prompt that starts like an
earlier one reuses that earlier prompt's cached blocks (``--prefix-block`` tokens each). Bad input ends with
one line on stderr, exit 2; so does a run in which the model produced non-finite logits.
Non-scope: the engine's decisions (``core/``), the model maths (``models/``).
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mini_deepinfer.core.engine import MAX_SPEC_WIDTH, EngineConfig
from mini_deepinfer.core.request import MAX_SEED, MIN_TEMPERATURE, Request, SamplingParams
from mini_deepinfer.tools.cli import (
    FlagNeeds,
    OneLineParser,
    UsageError,
    add_execution_options,
    argument_bytes,
    execution_choice,
    in_flag_terms,
    printable,
    run_command,
)

if TYPE_CHECKING:
    from mini_deepinfer.core.engine import Engine
    from mini_deepinfer.models.loader import LoadedModel
    from mini_deepinfer.runtime.text import ChatTemplate, TextTokenizer

DEFAULT_CAPACITY = 1024
PROMPT_FILE_LIMIT = 16 * 2**20
"""The most bytes ``--prompt-file`` reads: a larger (or endless) file is refused, not read into memory."""
DEFAULT_DRAFT_WIDTH = 3
DEFAULT_PREFIX_BLOCK = 64
FLAG_NEEDS = (
    FlagNeeds("--draft-model", "--speculative"),
    FlagNeeds("--draft-width", "--speculative"),
    FlagNeeds("--prefix-block", "--prefix-cache"),
    FlagNeeds("--top-k", "--temperature", "above 0 (greedy decoding takes the most likely token)"),
    FlagNeeds("--top-p", "--temperature", "above 0 (greedy decoding takes the most likely token)"),
    FlagNeeds("--seed", "--temperature", "above 0 (greedy decoding draws no random numbers)"),
)
"""Options that change nothing without another: given alone, each is refused (``OneLineParser``)."""
FLAGS = {"kv_capacity": "--cache-capacity", "max_num_seqs": "--max-num-seqs",
         "max_batched_tokens": "--max-batched-tokens", "pipeline": "--pipeline",
         "spec_width": "--draft-width", "prefix_block": "--prefix-block",
         "max_new_tokens": "--max-new-tokens", "temperature": "--temperature", "top_k": "--top-k",
         "top_p": "--top-p", "seed": "--seed"}
"""The flag behind each engine and sampling parameter, for error messages (``in_flag_terms``)."""


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m mini_deepinfer.generate",
                      description="Generate text with a local Qwen3.5 or Qwen2 checkpoint.", needs=FLAG_NEEDS)
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--model", type=Path, help="local Hugging Face checkpoint folder")
    p.add_argument("--device", default="cpu", help="cpu, cuda[:N] or npu[:N] (default cpu)")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default float32)")
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeat for several)")
    p.add_argument("--prompt-file", type=Path,
                   help=f"UTF-8 text file, one prompt per non-empty line (lines end at \\n only); at most "
                        f"{PROMPT_FILE_LIMIT // 2**20} MiB are read")
    p.add_argument("--raw", action="store_true",
                   help="feed the prompt as is, without the chat template; special-token strings in it "
                        "(<|im_start|>) become control tokens, so give --raw only text you trust")
    p.add_argument("--max-new-tokens", type=int, default=128, help="output tokens per request (default 128)")
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at end-of-sequence tokens")
    p.add_argument("--cache-capacity", type=int, default=DEFAULT_CAPACITY,
                   help=f"KV slots (token positions, all requests together; default {DEFAULT_CAPACITY})")
    p.add_argument("--temperature", type=float, default=0.0,
                   help=f"0 = greedy (default); otherwise a finite number >= {MIN_TEMPERATURE:g}")
    p.add_argument("--top-k", type=int, help="keep the k most likely tokens, k >= 0 (0 = off)")
    p.add_argument("--top-p", type=float, help="nucleus sampling threshold in (0, 1] (1 = off)")
    p.add_argument("--seed", type=int,
                   help="seed of request i is SEED + i, each in 0..2**64-1 (random if omitted)")
    p.add_argument("--max-num-seqs", type=int, default=8, help="requests running at once (default 8)")
    p.add_argument("--max-batched-tokens", type=int, default=2048,
                   help="token budget per round (default 2048)")
    p.add_argument("--chunked-prefill", action="store_true", help="split long prompts across rounds")
    p.add_argument("--stagger-prompts", action="store_true", help="prompts arrive one round apart")
    p.add_argument("--pipeline", action="store_true",
                   help="cross-round execution: launch round N+1 before reading round N")
    add_execution_options(p, graphs_note="; refused with --speculative or --temperature > 0, where no round "
                                         "runs as a graph (neither flag: graphs only where they can run)")
    p.add_argument("--trace-rounds", action="store_true", help="print every round's schedule and cache")
    p.add_argument("--stream", action="store_true", help="print text as it is committed")
    p.add_argument("--cancel-after-tokens", type=int, metavar="N",
                   help="cancel each request once it has delivered at least N tokens")
    p.add_argument("--output", type=Path, help="write a run record (JSON) to this file")
    p.add_argument("--draft-model", type=Path,
                   help="local checkpoint of the draft model (with --speculative)")
    p.add_argument("--speculative", action="store_true",
                   help="speculative decoding: the draft model proposes, --model verifies")
    p.add_argument("--draft-width", type=int, metavar="K",
                   help=f"draft tokens per round, 1..{MAX_SPEC_WIDTH} (default {DEFAULT_DRAFT_WIDTH})")
    p.add_argument("--prefix-cache", action="store_true",
                   help="reuse the cached blocks of earlier prompts that start with the same tokens")
    p.add_argument("--prefix-block", type=int,
                   help="tokens per prefix-cache block, the state snapshot interval (default "
                        f"{DEFAULT_PREFIX_BLOCK})")
    p.add_argument("--check-greedy", action="store_true",
                   help="compare the delivered tokens with an independent plain greedy run of --model")
    return p


@dataclass(kw_only=True)
class Options:
    """Every resolved option; stored as the run record's ``config``."""

    model: str
    device: str
    dtype: str
    prompts: list[str]
    raw: bool
    max_new_tokens: int
    ignore_eos: bool
    cache_capacity: int
    temperature: float
    top_k: int
    top_p: float
    seed: int | None
    max_num_seqs: int
    max_batched_tokens: int
    chunked_prefill: bool
    stagger_prompts: bool
    pipeline: bool
    trace_rounds: bool
    stream: bool
    cancel_after_tokens: int | None
    output: str | None
    draft_model: str | None = None
    speculative: bool = False
    draft_width: int | None = None
    check_greedy: bool = False
    graphs: bool | None = None  # --graphs (True), --eager (False), neither: the device's default
    compile: bool = False  # --compile: the graph path's decode step through torch.compile
    prefix_cache: bool = False
    prefix_block: int = 64
    extra: dict = field(default_factory=dict)

    def engine_config(self) -> EngineConfig:
        """The engine's numbers; making the config checks them (one line for any that is out of range)."""
        return EngineConfig(kv_capacity=self.cache_capacity, max_num_seqs=self.max_num_seqs,
                            max_batched_tokens=self.max_batched_tokens, chunked_prefill=self.chunked_prefill,
                            pipeline=self.pipeline, spec_width=self.draft_width or 0,
                            prefix_cache=self.prefix_cache, prefix_block=self.prefix_block)

    def sampling_params(self, eos_ids: list[int], index: int) -> SamplingParams:
        """Request ``index``'s parameters; making them checks the sampling flags."""
        seed = None if self.seed is None else self.seed + index
        return SamplingParams(max_new_tokens=self.max_new_tokens, eos_token_ids=tuple(eos_ids),
                              ignore_eos=self.ignore_eos, temperature=self.temperature, top_k=self.top_k,
                              top_p=self.top_p, seed=seed)


def read_prompt_file(path: Path) -> list[str]:
    """The non-empty lines of a UTF-8 file, split at ``\\n`` only (a form feed or U+2028 inside a line is part
    of its prompt); a byte-order mark at its start is not part of the first prompt. At most
    ``PROMPT_FILE_LIMIT`` bytes are read."""
    data = read_prompt_bytes(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"prompt file {path} is not UTF-8 text (byte {exc.start})") from None
    return [line.strip() for line in text.split("\n") if line.strip()]


def read_prompt_bytes(path: Path) -> bytes:
    """The file's bytes, refused past ``PROMPT_FILE_LIMIT`` (``/dev/zero`` never ends)."""
    try:
        with open(path, "rb") as file:
            data = file.read(PROMPT_FILE_LIMIT + 1)
    except FileNotFoundError:
        raise UsageError(f"prompt file not found: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"prompt file {path} is a folder") from None
    except OSError as exc:
        raise UsageError(f"cannot read prompt file {path}: {exc.strerror}") from None
    if len(data) > PROMPT_FILE_LIMIT:
        raise UsageError(f"prompt file {path} is larger than {PROMPT_FILE_LIMIT // 2**20} MiB, the most "
                         "--prompt-file reads")
    return data


def check_prompt_text(prompt: str, index: int) -> str:
    """A ``--prompt`` must be UTF-8. Python decodes arguments with the locale's encoding, keeping bytes it
    cannot decode as lone surrogates; so the argument's own bytes are taken back and decoded as UTF-8: under
    ``LC_ALL=C`` a valid ``你好`` is accepted, under any locale a byte that is not UTF-8 is refused."""
    data = argument_bytes(prompt)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = len(data[: exc.start].decode("utf-8"))
        raise UsageError(f"--prompt {index + 1} is not UTF-8 text (byte 0x{data[exc.start]:02x} at character "
                         f"{at})") from None


def resolve_options(argv: list[str]) -> Options:
    """Parse the flags and check every one of them, before anything heavy is imported or loaded: the engine's
    and the sampling numbers are checked by making an ``EngineConfig`` and each ``SamplingParams``."""
    a = build_parser().parse_args(argv)
    if a.model is None:
        raise UsageError("--model is required (a local checkpoint folder)")
    prompts = [check_prompt_text(p, i) for i, p in enumerate(a.prompt)]
    check_output_is_no_input(a)
    prompts += read_prompt_file(a.prompt_file) if a.prompt_file else []
    if not prompts:
        raise UsageError("give at least one --prompt (or --prompt-file)")
    if a.cancel_after_tokens is not None and a.cancel_after_tokens < 1:
        raise UsageError(f"--cancel-after-tokens must be >= 1, got {a.cancel_after_tokens}")
    check_speculative_flags(a)
    check_execution_flags(a)
    check_seed(a.seed, len(prompts))
    seed = a.seed if a.seed is not None or a.temperature == 0 else secrets.randbits(31)
    options = Options(
        model=str(a.model), device=a.device, dtype=a.dtype, prompts=prompts, raw=a.raw,
        max_new_tokens=a.max_new_tokens, ignore_eos=a.ignore_eos, cache_capacity=a.cache_capacity,
        temperature=a.temperature, top_k=0 if a.top_k is None else a.top_k,
        top_p=1.0 if a.top_p is None else a.top_p, seed=seed, max_num_seqs=a.max_num_seqs,
        max_batched_tokens=a.max_batched_tokens, chunked_prefill=a.chunked_prefill,
        stagger_prompts=a.stagger_prompts, pipeline=a.pipeline, trace_rounds=a.trace_rounds, stream=a.stream,
        cancel_after_tokens=a.cancel_after_tokens, output=str(a.output) if a.output else None,
        draft_model=str(a.draft_model) if a.speculative else None, speculative=a.speculative,
        draft_width=(a.draft_width or DEFAULT_DRAFT_WIDTH) if a.speculative else None,
        check_greedy=a.check_greedy, graphs=execution_choice(a), compile=a.compile,
        prefix_cache=a.prefix_cache,
        prefix_block=DEFAULT_PREFIX_BLOCK if a.prefix_block is None else a.prefix_block)
    with in_flag_terms(FLAGS):
        options.engine_config()
        for i in range(len(prompts)):
            options.sampling_params([], i)
    return options


def check_output_is_no_input(a) -> None:
    """``--output`` must not be the ``--prompt-file``: the record would replace the prompts it came from."""
    if a.output and a.prompt_file and os.path.realpath(a.output) == os.path.realpath(a.prompt_file):
        raise UsageError(f"--output {a.output} is the --prompt-file; writing the record there would replace "
                         "the prompts")


def check_speculative_flags(a) -> None:
    """``--speculative`` needs a draft (the converse is in ``FLAG_NEEDS``); greedy checks need greedy
    decoding."""
    if a.speculative and a.draft_model is None:
        raise UsageError("--speculative needs --draft-model (a local checkpoint of the draft model)")
    if a.draft_width is not None and not 1 <= a.draft_width <= MAX_SPEC_WIDTH:
        raise UsageError(f"--draft-width must be an integer in 1..{MAX_SPEC_WIDTH}, got {a.draft_width}")
    if a.check_greedy and a.temperature > 0:
        raise UsageError("--check-greedy compares with greedy decoding; it cannot be combined with sampling "
                         f"(--temperature {a.temperature})")


def check_execution_flags(a) -> None:
    """``--graphs`` (and ``--compile``, which implies it) runs greedy plain decode rounds as graphs: with a
    draft or with sampling none would."""
    flag = "--compile" if a.compile else "--graphs" if a.graphs else None
    if flag and a.speculative:
        raise UsageError(f"{flag} cannot be combined with --speculative: speculative rounds run eagerly "
                         f"(drop {flag})")
    if flag and a.temperature > 0:
        raise UsageError(f"{flag} runs only greedy decode rounds as graphs; with --temperature "
                         f"{a.temperature} every round would run eagerly (drop {flag})")


def check_seed(seed: int | None, prompts: int) -> None:
    """Request i gets ``SEED + i``: the last one must still be a seed a generator takes."""
    if seed is not None and not 0 <= seed <= MAX_SEED - (prompts - 1):
        raise UsageError(f"--seed must be in 0..2**64-{prompts} (request i gets SEED + i; {prompts} "
                         f"prompt{'s' if prompts > 1 else ''}), got {seed}")


@dataclass
class Text:
    """The checkpoint's text layer: tokenizer, chat template and stop ids."""

    tokenizer: TextTokenizer
    template: ChatTemplate | None
    eos_ids: list[int]


@dataclass
class Loaded:
    """The weights ready to run, and how long loading them took."""

    target: LoadedModel
    device: Any  # torch.device
    load_s: float
    draft: LoadedModel | None = None  # --draft-model


def load_text_layer(options: Options) -> Text:
    from mini_deepinfer.runtime.text import load_text

    return Text(*load_text(options.model))


def load_weights(options: Options, text: Text) -> Loaded:
    from mini_deepinfer.models.loader import load_checkpoint
    from mini_deepinfer.runtime.device import resolve_device, resolve_dtype

    device, dtype = resolve_device(options.device), resolve_dtype(options.dtype)
    start = time.perf_counter()
    target = load_checkpoint(options.model, dtype, device)
    draft = load_draft(options.draft_model, text, dtype, device) if options.speculative else None
    return Loaded(target, device, time.perf_counter() - start, draft)


def load_draft(path: str, text: Text, dtype, device) -> LoadedModel:
    """Load the draft checkpoint; refuse one whose tokenizer differs from the target's (``build_engine``
    refuses a different vocabulary size)."""
    from mini_deepinfer.models.loader import load_checkpoint
    from mini_deepinfer.runtime.text import load_text

    draft_tokenizer, _, _ = load_text(path)
    same_file = draft_tokenizer.tokenizer is text.tokenizer.tokenizer  # the same bytes: parsed once
    if not same_file and draft_tokenizer.tokenizer.get_vocab() != text.tokenizer.tokenizer.get_vocab():
        raise UsageError(f"the draft model's tokenizer ({path}) differs from the target's; "
                         "speculative decoding needs the same tokenizer")
    return load_checkpoint(path, dtype, device)


# --8<-- [start:encode_prompt]
def encode_prompt(text: str, layer: Text, options: Options) -> list[int]:
    """``--raw``: the text as the tokenizer reads it (special-token strings are control tokens). Otherwise one
    user turn of the chat template, the user's text encoded as text (``encode_user_prompt``)."""
    from mini_deepinfer.runtime.text import encode_user_prompt

    if options.raw:
        return layer.tokenizer.encode(text)
    if layer.template is None:
        raise UsageError(f"{options.model} has no chat template; use --raw to feed prompts as they are")
    return encode_user_prompt(layer.tokenizer, layer.template, text)
# --8<-- [end:encode_prompt]


# --8<-- [start:drive]
def drive(engine: Engine, requests: list[Request], options: Options, out: Printer) -> None:
    """Add the requests (all at once, or one per round), step until done, stream, cancel after N tokens."""
    queue = list(requests)
    while queue or engine.has_unfinished():
        arriving, queue = (queue[:1], queue[1:]) if options.stagger_prompts else (queue, [])
        for req in arriving:
            engine.add(req)
        for delivery in engine.step():
            out.delivered(delivery)
            req = engine.requests[delivery.request_id]
            limit = options.cancel_after_tokens
            if limit is not None and not req.finished and len(req.output_token_ids) >= limit:
                engine.cancel(req.request_id)  # at a group boundary: a group is never cut
        out.round_done(engine)
# --8<-- [end:drive]


class Printer:
    """What the user sees: streamed pieces, the per-round trace, and the text with its footer."""

    def __init__(self, options: Options, text: Text, request_ids: list[str], file=None) -> None:
        from mini_deepinfer.runtime.text import StreamDetokenizer

        self.options, self.text, self.file = options, text, file or sys.stdout
        self.many = len(request_ids) > 1
        self.streams = {rid: StreamDetokenizer(text.tokenizer, skip_special_tokens=True)
                        for rid in request_ids}

    def write(self, text: str) -> None:
        self.file.write(text)
        self.file.flush()

    def event(self, event) -> None:
        from mini_deepinfer.core.trace import format_event

        if self.options.trace_rounds:
            self.write(format_event(event) + "\n")

    def delivered(self, delivery) -> None:
        if not self.options.stream:
            return
        stream = self.streams[delivery.request_id]
        piece = stream.push(delivery.tokens) + (stream.finish() if delivery.finish_reason else "")
        if piece and self.many:
            self.write(f"[{delivery.request_id}] {piece}\n")
        elif piece:
            self.write(piece)

    def round_done(self, engine: Engine) -> None:
        if self.options.trace_rounds:
            state = engine.state_pool
            self.write(f"[round {engine.round_id}] cache    KV free {engine.kv_pool.num_free}/"
                       f"{engine.kv_pool.capacity}, state free {state.num_free}/{state.capacity}"
                       f"{draft_cache_note(engine, self.options)}\n")

    def results(self, engine: Engine) -> None:
        if self.options.stream and not self.many:
            self.write("\n")
        for rid, req in engine.requests.items():
            if self.many:
                self.write(f"{rid}:\n")
            if not self.options.stream:
                self.write(self.text.tokenizer.decode(req.output_token_ids, skip_special_tokens=True) + "\n")
            self.write(footer(req, engine, self.options) + "\n")
        if self.options.speculative:
            self.write(speculative_footer(speculative_counts(engine)) + "\n")


# --8<-- [start:footer]
def footer(req: Request, engine: Engine, options: Options) -> str:
    """The line after each answer, e.g. ``[eos; 9 output tokens; free KV slots 512/512]``."""
    reason = req.finish_reason.value if req.finish_reason else "running"
    draft = engine.runner.draft if options.speculative else None
    draft_part = ("" if draft is None
                  else f"; draft free KV slots {draft.free_kv_slots()}/{draft.cache.kv_capacity}")
    cached = f"; {req.cached_prompt_tokens} prompt tokens cached" if options.prefix_cache else ""
    return (f"[{reason}; {len(req.output_token_ids)} output tokens{cached}; "
            f"free KV slots {engine.kv_pool.num_free}/{engine.kv_pool.capacity}{draft_part}]")
# --8<-- [end:footer]


# --8<-- [start:speculative_footer]
def speculative_counts(engine: Engine) -> dict[str, Any]:
    """The speculative runner's own counters (``SpeculativeRunner.stats``) as the record's ``speculative``."""
    from mini_deepinfer.tools.records import speculative_info

    stats = engine.runner.stats
    return speculative_info(stats["verify_rounds"], stats["proposed"], stats["accepted"])


def speculative_footer(counts: dict[str, Any]) -> str:
    """The line after the answers of a ``--speculative`` run, over all its requests, e.g. ``[speculative: 4
    verify rounds, 9 of 12 drafts accepted (75%), 2.25 accepted per round]``; the bonus or corrected token
    each round adds is not an accepted draft."""
    rounds, proposed = counts["verify_rounds"], counts["drafts_proposed"]
    if not rounds:
        return "[speculative: no verify round ran, no draft was proposed]"
    return (f"[speculative: {rounds} verify round{'s' * (rounds != 1)}, {counts['drafts_accepted']} of "
            f"{proposed} draft{'s' * (proposed != 1)} accepted ({counts['acceptance_rate']:.0%}), "
            f"{counts['accepted_per_round']:.2f} accepted per round]")
# --8<-- [end:speculative_footer]


def draft_cache_note(engine: Engine, options: Options) -> str:
    """``--trace-rounds`` with a draft: what its cache holds after the round."""
    if not options.speculative:
        return ""
    draft = engine.runner.draft
    return (f"; draft KV free {draft.free_kv_slots()}/{draft.cache.kv_capacity}, "
            f"draft state free {draft.free_state_slots()}/{draft.cache.state_capacity}")


def build_record(argv: list[str], options: Options, loaded: Loaded, text: Text, engine: Engine,
                 prompts: dict[str, str], run_s: float):
    from mini_deepinfer.runtime.device import device_info, dtype_name
    from mini_deepinfer.tools.records import RunRecord, model_info

    record = RunRecord.start(["python", "-m", "mini_deepinfer.generate", *argv], asdict(options))
    record.device = device_info(loaded.device)
    target = loaded.target
    record.model = model_info(target.path, target.config.architecture, target.num_parameters,
                              dtype_name(target.dtype))
    record.model["weights"] = target.weights
    for rid, req in engine.requests.items():
        first = None if req.first_token_at is None else req.first_token_at - req.submitted_at
        record.add_request(prompt=prompts[rid], prompt_token_ids=req.prompt_token_ids,
                           output_token_ids=req.output_token_ids, finish_reason=req.finish_reason,
                           text=text.tokenizer.decode(req.output_token_ids, skip_special_tokens=True),
                           first_token_s=first, seed=req.params.seed,
                           committed_groups=req.committed_groups if options.speculative else None,
                           cached_prompt_tokens=req.cached_prompt_tokens if options.prefix_cache else None)
    record.set_cache("target", engine.kv_pool.capacity, engine.kv_pool.num_free,
                     engine.state_pool.capacity, engine.state_pool.num_free)
    if engine.prefix_cache is not None:  # slots the prefix cache still holds at the end, not leaked ones
        record.cache["target"]["kv"]["prefix_cached"] = engine.prefix_cache.cached_slots()
    if options.speculative:
        draft, runner_draft = loaded.draft, engine.runner.draft
        record.draft_model = model_info(draft.path, draft.config.architecture, draft.num_parameters,
                                        dtype_name(draft.dtype))
        record.draft_model["weights"] = draft.weights
        record.set_cache("draft", runner_draft.cache.kv_capacity, runner_draft.free_kv_slots(),
                         runner_draft.cache.state_capacity, runner_draft.free_state_slots())
        record.speculative = speculative_counts(engine)
    record.timings["load_s"], record.timings["run_s"] = loaded.load_s, run_s
    record.execution = execution_info(engine)
    return record


def execution_info(engine: Engine) -> dict:
    """How the rounds ran: on captured graphs (static buffers, on a CPU) or eagerly, how many of each, and
    whether the graph path's step was compiled."""
    graphs = engine.runner.graphs
    return {"graphs": graphs is not None, "captured": graphs is not None and graphs.capture,
            "compiled": graphs is not None and graphs.compiled, "rounds": dict(engine.runner.rounds_by_mode)}


def check_output(options: Options) -> None:
    """The record can be written, and writing it replaces no file of a checkpoint the run reads."""
    from mini_deepinfer.tools.records import check_output_path

    check_output_path(options.output)
    output = Path(os.path.realpath(options.output))
    for flag, folder in (("--model", options.model), ("--draft-model", options.draft_model)):
        if folder is not None and output.is_file() and Path(os.path.realpath(folder)) in output.parents:
            raise UsageError(f"--output {options.output} is a file of the checkpoint {flag} {folder}; "
                             "writing the record there would replace it")


def model_configs(options: Options) -> dict[str, Any]:
    """The ``ModelConfig`` of ``--model`` (and of ``--draft-model``), by ``"FLAG PATH"``, read before the
    weights load (``config.json`` is read again by the loader; it is small)."""
    from mini_deepinfer.models.loader import checkpoint_folder, parse_model_config, read_config_dict

    paths = [options.model] + ([options.draft_model] if options.speculative else [])
    configs = {}
    for flag, path in zip(("--model", "--draft-model"), paths):
        folder = checkpoint_folder(path)
        configs[f"{flag} {path}"] = parse_model_config(read_config_dict(folder), folder)
    return configs


def check_positions(options: Options, token_ids: list[list[int]]) -> None:
    """No prompt plus ``--max-new-tokens`` may go past a model's ``max_position_embeddings``."""
    from mini_deepinfer.tools.checks import check_positions as check

    for model, config in model_configs(options).items():
        for i, ids in enumerate(token_ids):
            what = f"req-{i}: a prompt of {len(ids)} tokens plus --max-new-tokens {options.max_new_tokens}"
            check(len(ids) + options.max_new_tokens, config.max_position_embeddings, what, model)


def check_capacity(options: Options, rids: list[str], token_ids: list[list[int]],
                   params: list[SamplingParams]) -> None:
    """Every request's worst case (``Request.max_cache_tokens``, what the engine's ``check_fits`` holds
    against the cache) must fit ``--cache-capacity``; the message names the smallest capacity that fits them
    all."""
    requests = [Request(rid, tuple(ids), p) for rid, ids, p in zip(rids, token_ids, params)]
    smallest = max(req.max_cache_tokens() for req in requests)
    for req in requests:
        if req.max_cache_tokens() > options.cache_capacity:
            raise UsageError(f"{req.request_id}: prompt of {req.prompt_len} tokens plus --max-new-tokens "
                             f"{options.max_new_tokens} needs {req.max_cache_tokens()} KV slots; the cache "
                             f"has {options.cache_capacity}: pass --cache-capacity {smallest} or more")


def check_vocabulary(options: Options, text: Text) -> None:
    """Every id the tokenizer can produce, and every stop id, has a row in each model's embedding: checked
    against ``config.json`` before the weights load (an id past it would fail inside the first forward; a
    stop id past it would never stop a request)."""
    for model, config in model_configs(options).items():
        config_file = Path(model.partition(" ")[2]) / "config.json"
        text.tokenizer.check_ids_below(config.vocab_size, str(config_file))
        late = [i for i in text.eos_ids if not 0 <= i < config.vocab_size]
        if late:
            raise UsageError(f"stop id {late[0]} (eos_token_id of {options.model}) is past the vocab_size "
                             f"{config.vocab_size} of {config_file}: no request would ever stop on it")


def check_memory(options: Options, graphs: bool) -> None:
    """Refuse a cache larger than the device's memory in one line, before it is allocated."""
    from mini_deepinfer.runtime.device import resolve_device, resolve_dtype
    from mini_deepinfer.runtime.factory import default_snapshots
    from mini_deepinfer.tools.memory import cache_bytes, check_cache_fits, device_memory

    device, itemsize = resolve_device(options.device), resolve_dtype(options.dtype).itemsize
    needed = {"kv": 0, "state": 0}
    snapshots = default_snapshots(options.engine_config()) if options.prefix_cache else 0  # rows like states
    for config in model_configs(options).values():
        part = cache_bytes(config, options.cache_capacity, options.max_num_seqs + snapshots, itemsize,
                           dummy_slots=graphs)
        needed = {key: needed[key] + part[key] for key in needed}
    what = f"--cache-capacity {options.cache_capacity} and --max-num-seqs {options.max_num_seqs}"
    check_cache_fits(needed, device_memory(device), what)


def graphs_to_use(options: Options) -> bool:
    """Graphs where asked (``--graphs`` with a draft or sampling is refused earlier), or by the device's
    default where they can run: never with a draft, never when every round samples."""
    from mini_deepinfer.runtime.device import resolve_device
    from mini_deepinfer.runtime.factory import use_graphs

    can_run = not options.speculative and options.temperature == 0
    return can_run and use_graphs(resolve_device(options.device), options.graphs)


def run(argv: list[str]) -> int:
    """Every flag, the output path, the text layer, the prompts, whether each prompt fits the cache, and the
    cache's size in memory are checked before the weights load; whether each prompt fits the budget is
    checked by the engine (``new_request``) before any round runs. A run that fails writes no record, so an
    old one stays."""
    options = resolve_options(argv)
    if options.output:
        check_output(options)
    text = load_text_layer(options)
    rids = [f"req-{i}" for i in range(len(options.prompts))]
    params = [options.sampling_params(text.eos_ids, i) for i in range(len(rids))]
    check_vocabulary(options, text)
    token_ids = [encode_prompt(prompt, text, options) for prompt in options.prompts]
    check_positions(options, token_ids)
    check_capacity(options, rids, token_ids, params)
    graphs = graphs_to_use(options)
    check_memory(options, graphs)
    loaded = load_weights(options, text)
    from mini_deepinfer.core.trace import Trace
    from mini_deepinfer.runtime.factory import build_engine

    out = Printer(options, text, rids)
    with in_flag_terms(FLAGS):
        engine = build_engine(loaded.target.model, options.engine_config(),
                              draft=loaded.draft.model if loaded.draft else None,
                              trace=Trace(listener=out.event), use_graphs=graphs,
                              compile_step=graphs and options.compile)
    requests = [engine.new_request(rid, ids, p) for rid, ids, p in zip(rids, token_ids, params)]
    start = time.perf_counter()
    drive(engine, requests, options, out)
    run_s = time.perf_counter() - start
    out.results(engine)
    failed = [req.error for req in engine.requests.values() if req.error]
    if failed:  # the runner failed (non-finite logits, for one): the answers above are incomplete
        print(f"error: {printable(failed[0])}", file=sys.stderr)
        return 2
    greedy = run_check_greedy(loaded, engine, out) if options.check_greedy else None
    if options.output:
        record = build_record(argv, options, loaded, text, engine, dict(zip(rids, options.prompts)), run_s)
        if greedy is not None:
            record.add_check("check_greedy", greedy)
        record.write(options.output)
    return 0


def run_check_greedy(loaded: Loaded, engine: Engine, out: Printer) -> dict:
    """``--check-greedy``: the delivered tokens against an independent plain greedy run of the target."""
    from mini_deepinfer.tools.checks import check_greedy

    result = check_greedy(loaded.target.model, list(engine.requests.values()))
    verdict = "match" if result["passed"] else "DIFFER from"
    out.write(f"[check-greedy: {result['compared_tokens']} delivered tokens {verdict} a plain greedy run "
              "of the target]\n")
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--version" in argv:
        from mini_deepinfer.tools.records import package_version

        print(f"mini-deepinfer {package_version()}")
        return 0
    return run_command(run, argv)


if __name__ == "__main__":
    sys.exit(main())
