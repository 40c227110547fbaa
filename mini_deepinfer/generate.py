"""``python -m mini_deepinfer.generate``: text in, text out, through the same engine loop as the toy.

Scope: the command line for one local checkpoint: load it (``--model``, ``--device``, ``--dtype``),
turn prompts into token ids (chat template unless ``--raw``), run them through a ``BatchEngine``
(budget, chunking, staggered arrival, cross-round ``--pipeline``), print or stream the text, cancel
after N tokens, and write a run record (``--output``). With ``--speculative`` a second, smaller checkpoint
(``--draft-model``) proposes ``--draft-width`` tokens per round and the model verifies them; tokens are then
delivered in groups, and ``--check-greedy`` compares them with a plain greedy run. Bad input ends with one
line on stderr, exit 2.
Non-scope: the engine's decisions (``engine.py``, ``batch.py``, ``commit.py``), the model maths.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .request import SamplingParams

DEFAULT_CAPACITY = 1024
DEFAULT_DRAFT_WIDTH = 3
MAX_DRAFT_WIDTH = 16


class UsageError(ValueError):
    """Bad command-line input: printed as one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus a message on errors; we print one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m mini_deepinfer.generate",
                      description="Generate text with a local Qwen3.5 or Qwen2 checkpoint.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--model", type=Path, help="local Hugging Face checkpoint folder")
    p.add_argument("--device", default="cpu", help="cpu, cuda[:N] or npu[:N] (default cpu)")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default float32)")
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeat for several)")
    p.add_argument("--prompt-file", type=Path, help="UTF-8 text file, one prompt per non-empty line")
    p.add_argument("--raw", action="store_true", help="feed the prompt as is, without the chat template")
    p.add_argument("--max-new-tokens", type=int, default=128, help="output tokens per request (default 128)")
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at end-of-sequence tokens")
    p.add_argument("--cache-capacity", type=int, default=DEFAULT_CAPACITY,
                   help=f"KV slots (token positions, all requests together; default {DEFAULT_CAPACITY})")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (1 = off)")
    p.add_argument("--seed", type=int, help="seed of request i is SEED + i (random if omitted)")
    p.add_argument("--max-num-seqs", type=int, default=8, help="requests running at once (default 8)")
    p.add_argument("--max-batched-tokens", type=int, default=2048,
                   help="token budget per round (default 2048)")
    p.add_argument("--chunked-prefill", action="store_true", help="split long prompts across rounds")
    p.add_argument("--stagger-prompts", action="store_true", help="prompts arrive one round apart")
    p.add_argument("--pipeline", action="store_true",
                   help="cross-round execution: launch round N+1 before reading round N")
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
                   help=f"draft tokens per round, 1..{MAX_DRAFT_WIDTH} (default {DEFAULT_DRAFT_WIDTH})")
    p.add_argument("--check-greedy", action="store_true",
                   help="compare the delivered tokens with an independent plain greedy run of --model")
    return p


@dataclass
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
    extra: dict = field(default_factory=dict)


def read_prompt_file(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"prompt file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"prompt file {path} is not UTF-8 text (byte {exc.start})") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def check_ranges(a: argparse.Namespace) -> None:
    """Refuse numbers the engine could never use, before anything is loaded."""
    rules = [
        (a.max_new_tokens >= 0, f"--max-new-tokens must be >= 0, got {a.max_new_tokens}"),
        (a.cache_capacity >= 1, f"--cache-capacity must be >= 1, got {a.cache_capacity}"),
        (a.max_num_seqs >= 1, f"--max-num-seqs must be >= 1, got {a.max_num_seqs}"),
        (a.max_batched_tokens >= 1, f"--max-batched-tokens must be >= 1, got {a.max_batched_tokens}"),
        (a.temperature >= 0, f"--temperature must be >= 0, got {a.temperature}"),
        (a.top_k >= 0, f"--top-k must be >= 0, got {a.top_k}"),
        (0 < a.top_p <= 1, f"--top-p must be in (0, 1], got {a.top_p}"),
        (a.cancel_after_tokens is None or a.cancel_after_tokens >= 1,
         f"--cancel-after-tokens must be >= 1, got {a.cancel_after_tokens}"),
        (a.draft_width is None or 1 <= a.draft_width <= MAX_DRAFT_WIDTH,
         f"--draft-width must be in 1..{MAX_DRAFT_WIDTH}, got {a.draft_width}"),
    ]
    for ok, message in rules:
        if not ok:
            raise UsageError(message)


def resolve_options(argv: list[str]) -> Options:
    a = build_parser().parse_args(argv)
    if a.model is None:
        raise UsageError("--model is required (a local checkpoint folder)")
    prompts = list(a.prompt) + (read_prompt_file(a.prompt_file) if a.prompt_file else [])
    if not prompts:
        raise UsageError("give at least one --prompt (or --prompt-file)")
    check_ranges(a)
    seed = a.seed if a.seed is not None or a.temperature == 0 else secrets.randbits(31)
    options = Options(str(a.model), a.device, a.dtype, prompts, a.raw, a.max_new_tokens, a.ignore_eos,
                      a.cache_capacity, a.temperature, a.top_k, a.top_p, seed, a.max_num_seqs,
                      a.max_batched_tokens, a.chunked_prefill, a.stagger_prompts, a.pipeline, a.trace_rounds,
                      a.stream, a.cancel_after_tokens, str(a.output) if a.output else None)
    check_speculative_flags(a)
    if a.speculative:
        options.draft_model, options.speculative = str(a.draft_model), True
        options.draft_width = a.draft_width or DEFAULT_DRAFT_WIDTH
    options.check_greedy = a.check_greedy
    return options


def check_speculative_flags(a: argparse.Namespace) -> None:
    """The two-model flags go together; greedy checks need greedy decoding."""
    if a.speculative and a.draft_model is None:
        raise UsageError("--speculative needs --draft-model (a local checkpoint of the draft model)")
    if not a.speculative and (a.draft_model is not None or a.draft_width is not None):
        raise UsageError("--draft-model and --draft-width are used only with --speculative")
    if a.speculative and a.pipeline:
        raise UsageError("--speculative cannot be combined with --pipeline "
                         "(a speculative round is synchronous)")
    if a.check_greedy and a.temperature > 0:
        raise UsageError("--check-greedy compares with greedy decoding; it cannot be combined with sampling "
                         f"(--temperature {a.temperature})")


@dataclass
class Loaded:
    """A checkpoint ready to run: model, text layer and timing of the load."""

    loaded: object  # models.loader.LoadedModel
    tokenizer: object  # text.TextTokenizer
    template: object | None  # text.ChatTemplate
    eos_ids: list[int]
    device: object  # torch.device
    load_s: float
    draft: object | None = None  # models.loader.LoadedModel of --draft-model


def load(options: Options) -> Loaded:
    from .device import resolve_device, resolve_dtype
    from .models.loader import load_checkpoint
    from .text import load_text

    device, dtype = resolve_device(options.device), resolve_dtype(options.dtype)
    start = time.perf_counter()
    loaded = load_checkpoint(options.model, dtype, device)
    tokenizer, template, eos_ids = load_text(options.model)
    if tokenizer.vocab_size > loaded.config.vocab_size:
        raise UsageError(f"tokenizer has {tokenizer.vocab_size} tokens but the model only "
                         f"{loaded.config.vocab_size}: they do not belong together")
    draft = load_draft(options.draft_model, tokenizer, loaded, dtype, device) if options.speculative else None
    return Loaded(loaded, tokenizer, template, eos_ids, device, time.perf_counter() - start, draft)


def load_draft(path: str, tokenizer, target, dtype, device):
    """Load the draft checkpoint; refuse one whose tokenizer or vocabulary differs from the target's."""
    from .models.loader import load_checkpoint
    from .speculative import check_same_vocabulary
    from .text import load_text

    draft = load_checkpoint(path, dtype, device)
    draft_tokenizer, _, _ = load_text(path)
    if draft_tokenizer.tokenizer.get_vocab() != tokenizer.tokenizer.get_vocab():
        raise UsageError(f"the draft model's tokenizer ({path}) differs from the target's; "
                         "speculative decoding needs the same tokenizer")
    check_same_vocabulary(target.model, draft.model)
    return draft


# --8<-- [start:encode_prompt]
def encode_prompt(text: str, ld: Loaded, raw: bool) -> list[int]:
    if raw:
        return ld.tokenizer.encode(text)
    if ld.template is None:
        raise UsageError(f"{ld.loaded.path} has no chat template; use --raw to feed prompts as they are")
    return ld.tokenizer.encode(ld.template.render([{"role": "user", "content": text}]))
# --8<-- [end:encode_prompt]


def sampling_params(options: Options, eos_ids: list[int], index: int) -> SamplingParams:
    seed = None if options.seed is None else options.seed + index
    return SamplingParams(max_new_tokens=options.max_new_tokens, eos_token_ids=tuple(eos_ids),
                          ignore_eos=options.ignore_eos, temperature=options.temperature,
                          top_k=options.top_k, top_p=options.top_p, seed=seed)


def make_engine(options: Options, ld: Loaded, trace):
    from .batch import BatchEngine
    from .runner import ModelRunner, new_cache

    model = ld.loaded.model
    cache = new_cache(model, options.cache_capacity, options.max_num_seqs)
    runner = ModelRunner(model, cache) if ld.draft is None else speculative_runner(options, ld, cache)
    return BatchEngine(runner, options.cache_capacity, options.max_num_seqs,
                       max_num_seqs=options.max_num_seqs, max_batched_tokens=options.max_batched_tokens,
                       chunked_prefill=options.chunked_prefill, pipeline=options.pipeline, trace=trace,
                       spec_width=options.draft_width or 0)


def speculative_runner(options: Options, ld: Loaded, cache):
    """The target's runner with a ``ModelDraft``: same slot numbers, so the same capacities."""
    from .runner import new_cache
    from .speculative import ModelDraft, SpeculativeRunner

    draft_model = ld.draft.model
    draft = ModelDraft(draft_model, new_cache(draft_model, options.cache_capacity, options.max_num_seqs),
                       options.draft_width)
    return SpeculativeRunner(ld.loaded.model, cache, draft)


# --8<-- [start:drive]
def drive(engine, prompts: list[tuple[str, list[int], SamplingParams]], options: Options, out) -> None:
    """Submit (all at once, or one per round), step until done, stream, cancel after N tokens."""
    queue = list(prompts)
    while queue or engine.has_unfinished():
        arriving, queue = (queue[:1], queue[1:]) if options.stagger_prompts else (queue, [])
        for rid, ids, params in arriving:
            engine.submit(rid, ids, params)
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

    def __init__(self, options: Options, ld: Loaded, request_ids: list[str], file=None) -> None:
        from .text import StreamDetokenizer

        self.options, self.ld, self.file = options, ld, file or sys.stdout
        self.many = len(request_ids) > 1
        self.streams = {rid: StreamDetokenizer(ld.tokenizer, skip_special_tokens=True) for rid in request_ids}

    def write(self, text: str) -> None:
        self.file.write(text)
        self.file.flush()

    def event(self, event) -> None:
        from .trace import format_event

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

    def round_done(self, engine) -> None:
        if self.options.trace_rounds:
            state = engine.state_pool
            self.write(f"[round {engine.round_id}] cache    KV free {engine.kv_pool.num_free}/"
                       f"{engine.kv_pool.capacity}, state free {state.num_free}/{state.capacity}"
                       f"{draft_cache_note(engine)}\n")

    def results(self, engine) -> None:
        if self.options.stream and not self.many:
            self.write("\n")
        for rid, req in engine.requests.items():
            if self.many:
                self.write(f"{rid}:\n")
            if not self.options.stream:
                self.write(self.ld.tokenizer.decode(req.output_token_ids, skip_special_tokens=True) + "\n")
            self.write(footer(req, engine) + "\n")


# --8<-- [start:footer]
def footer(req, engine) -> str:
    """The line after each answer, e.g. ``[eos; 9 output tokens; free KV slots 512/512]``."""
    reason = req.finish_reason.value if req.finish_reason else "running"
    draft = getattr(engine.runner, "draft", None)
    draft_part = ("" if draft is None
                  else f"; draft free KV slots {draft.free_kv_slots()}/{draft.cache.kv_capacity}")
    return (f"[{reason}; {len(req.output_token_ids)} output tokens; "
            f"free KV slots {engine.kv_pool.num_free}/{engine.kv_pool.capacity}{draft_part}]")
# --8<-- [end:footer]


def draft_cache_note(engine) -> str:
    """``--trace-rounds`` with a draft: what its cache holds after the round."""
    draft = getattr(engine.runner, "draft", None)
    if draft is None:
        return ""
    return (f"; draft KV free {draft.free_kv_slots()}/{draft.cache.kv_capacity}, "
            f"draft state free {draft.free_state_slots()}/{draft.cache.state_capacity}")


def add_draft_to_record(record, ld: Loaded, engine) -> None:
    """Two-model runs: the draft checkpoint and the slots of the draft's cache at the end."""
    from .device import dtype_name
    from .records import model_info

    draft = engine.runner.draft
    record.draft_model = model_info(ld.draft.path, ld.draft.config.architecture, ld.draft.num_parameters,
                                    dtype_name(ld.draft.dtype))
    record.set_cache("draft", draft.cache.kv_capacity, draft.free_kv_slots(), draft.cache.state_capacity,
                     draft.free_state_slots())


def build_record(argv, options: Options, ld: Loaded, engine, texts: dict[str, str], run_s: float):
    from .device import device_info, dtype_name
    from .records import RunRecord, model_info

    record = RunRecord.start(["python", "-m", "mini_deepinfer.generate", *argv], asdict(options))
    record.device = device_info(ld.device)
    cfg = ld.loaded.config
    record.model = model_info(ld.loaded.path, cfg.architecture, ld.loaded.num_parameters,
                              dtype_name(ld.loaded.dtype))
    for rid, req in engine.requests.items():
        first = None if req.first_token_at is None else req.first_token_at - req.submitted_at
        record.add_request(prompt=texts[rid], prompt_token_ids=req.prompt_token_ids,
                           output_token_ids=req.output_token_ids, finish_reason=req.finish_reason,
                           text=ld.tokenizer.decode(req.output_token_ids, skip_special_tokens=True),
                           first_token_s=first, seed=req.params.seed,
                           committed_groups=req.committed_groups if ld.draft is not None else None)
    record.set_cache("target", engine.kv_pool.capacity, engine.kv_pool.num_free,
                     engine.state_pool.capacity, engine.state_pool.num_free)
    if ld.draft is not None:
        add_draft_to_record(record, ld, engine)
    record.timings["load_s"], record.timings["run_s"] = ld.load_s, run_s
    return record


def run(argv: list[str]) -> int:
    options = resolve_options(argv)
    if options.output:
        from .records import check_output_path

        check_output_path(options.output)  # fail before a long load, not after
    ld = load(options)
    from .trace import Trace

    rids = [f"req-{i}" for i in range(len(options.prompts))]
    out = Printer(options, ld, rids)
    engine = make_engine(options, ld, Trace(listener=out.event))
    prompts = [(rid, encode_prompt(text, ld, options.raw), sampling_params(options, ld.eos_ids, i))
               for i, (rid, text) in enumerate(zip(rids, options.prompts))]
    for rid, ids, params in prompts:
        engine.check_fits(engine_request_preview(rid, ids, params))
    start = time.perf_counter()
    drive(engine, prompts, options, out)
    run_s = time.perf_counter() - start
    out.results(engine)
    greedy = run_check_greedy(ld, engine, out) if options.check_greedy else None
    if options.output:
        record = build_record(argv, options, ld, engine, dict(zip(rids, options.prompts)), run_s)
        if greedy is not None:
            record.add_check("check_greedy", greedy)
        record.write(options.output)
    return 0


def run_check_greedy(ld: Loaded, engine, out) -> dict:
    """``--check-greedy``: the delivered tokens against an independent plain greedy run of the target."""
    from .speculative import check_greedy

    result = check_greedy(ld.loaded.model, list(engine.requests.values()))
    verdict = "match" if result["passed"] else "DIFFER from"
    out.write(f"[check-greedy: {result['compared_tokens']} delivered tokens {verdict} a plain greedy run "
              "of the target]\n")
    return result


def engine_request_preview(rid: str, ids: list[int], params: SamplingParams):
    """A request object for ``check_fits``, so an impossible prompt is refused before any round runs."""
    from .request import Request

    return Request(rid, tuple(ids), params)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--version" in argv:
        from .records import package_version

        print(f"mini-deepinfer {package_version()}")
        return 0
    try:
        return run(argv)
    except ValueError as exc:  # every input error in the package is a ValueError with a one-line message
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
