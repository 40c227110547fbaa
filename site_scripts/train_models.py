"""``python -m site_scripts.train_models``: train the site's small Qwen3.5-shaped target and draft.

Usage::

    python -m site_scripts.train_models                # fetch the corpora, train, write trained/
    python -m site_scripts.train_models --smoke OUT    # a few steps of every stage, into OUT

One command, run once by hand (not by ``make test`` or ``make serve``; about an hour on two CPU threads):

1. fetch and split the corpora (``corpora.py``);
2. train a byte-level BPE tokenizer (``tokenizers``) on the training text of both languages, with Qwen's
   pre-tokenizer pattern and its special tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``;
3. train the target (both layer kinds) on next-token loss;
4. round the target to bfloat16, let it continue openings of the training text greedily (its own text, the
   kind a draft must predict at decode time), then distil the draft from its logits (KL divergence) on
   batches that are half training text, half the target's text; and train a second draft of the same shape
   on the corpus alone, to measure what distillation adds;
5. write each model in the Hugging Face layout (``config.json``, ``model.safetensors``,
   ``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json`` with a chat template) and a
   training record ``training.json`` beside it.

The models are transformers' ``Qwen3_5ForCausalLM``: the engine's own model runs without autograd (its
kernels write their outputs in place), so it cannot take a backward pass. Training is deterministic for a
given number of threads (``THREADS``, recorded): seeded initialisation and a seeded, fixed order of training
windows.

Non-scope: measuring generation and speculative acceptance with the engine (``measure_trained``).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from mini_deepinfer.tools.tokenizer_files import QWEN3_5_CHAT_TEMPLATE, QWEN3_5_PATTERN, byte_to_unicode

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "trained"
RUN_CACHE = ROOT / ".cache" / "train-run"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
VOCAB_SIZE = 4096
SEQ_LEN = 256
BATCH = 16
SHARES = {"en": 2, "zh": 1}  # windows of each language per 3 in a batch (English is the smaller corpus)
DRAFT_SHARES = {"en": 1, "zh": 1}  # the drafts' training windows
COMPUTE = torch.bfloat16  # autocast's matmul type; the weights and the optimizer stay float32
THREADS = 2  # both cores of the machines this runs on; the record says how many were used
PROMPT_TOKENS = 33  # an opening of training text that the target continues to a window of SEQ_LEN + 1
SEED = 20260
LOG_EVERY = 10
DRAFTS = ("draft", "draft-corpus-only")  # distilled from the target; trained on the corpus alone

# --8<-- [start:shapes]
TARGET_SHAPE = dict(hidden_size=256, intermediate_size=768, num_attention_heads=8, num_key_value_heads=2,
                    head_dim=32, linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32,
                    linear_value_head_dim=32,
                    layer_types=["linear_attention"] * 3 + ["full_attention"])
DRAFT_SHAPE = dict(hidden_size=192, intermediate_size=640, num_attention_heads=6, num_key_value_heads=2,
                   head_dim=32, linear_num_key_heads=3, linear_num_value_heads=6, linear_key_head_dim=32,
                   linear_value_head_dim=32, layer_types=["linear_attention", "full_attention"])
# --8<-- [end:shapes]


@dataclass(frozen=True)
class Schedule:
    """How one model trains: steps, peak learning rate and warm-up steps (cosine decay to 10 %), windows per
    batch, and the dropout on each layer's two residual branches (0: none)."""

    steps: int
    peak_lr: float
    warmup: int
    batch: int = BATCH
    dropout: float = 0.0

    def lr(self, step: int) -> float:
        if step < self.warmup:
            return self.peak_lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


# ---------------------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------------------


def train_tokenizer(texts: Sequence[str], vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE tokenizer trained on ``texts``, with Qwen's pre-tokenizer and special tokens."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE

    tokenizer = Tokenizer(BPE(ignore_merges=True))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN3_5_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[],
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tokenizer


def tokenizer_config(tokenizer) -> dict[str, Any]:
    """``tokenizer_config.json``: Qwen's special-token roles and this project's Qwen-style chat template."""
    decoder = {str(tokenizer.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                               "rstrip": False, "single_word": False, "special": True}
               for t in SPECIAL_TOKENS}
    return {
        "tokenizer_class": "Qwen2TokenizerFast", "add_bos_token": False, "add_prefix_space": False,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "errors": "replace", "clean_up_tokenization_spaces": False, "split_special_tokens": False,
        "model_max_length": 4096, "added_tokens_decoder": decoder, "chat_template": QWEN3_5_CHAT_TEMPLATE,
    }


def token_chars(tokenizer) -> list[int]:
    """For each token id, how many characters it completes (UTF-8 lead bytes it holds); 0 for specials."""
    to_byte = {ch: b for b, ch in byte_to_unicode().items()}
    counts = [0] * tokenizer.get_vocab_size()
    for token, index in tokenizer.get_vocab().items():
        if token in SPECIAL_TOKENS:
            continue
        counts[index] = sum(1 for ch in token if (to_byte[ch] & 0xC0) != 0x80)
    return counts


def token_stream(tokenizer, documents: Sequence[str]) -> torch.Tensor:
    """All documents as one id tensor, each followed by ``<|endoftext|>``."""
    eot = tokenizer.token_to_id("<|endoftext|>")
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(list(documents)):
        ids += encoding.ids
        ids.append(eot)
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------------------------------------------------
# Models and training
# ---------------------------------------------------------------------------------------------------------


def model_config(shape: dict[str, Any], vocab_size: int, eos_ids: Sequence[int]):
    """transformers' ``Qwen3_5TextConfig`` for ``shape``: Qwen3.5's rotary settings, tied embeddings."""
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        vocab_size=vocab_size, num_hidden_layers=len(shape["layer_types"]), **shape,
        tie_word_embeddings=True, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        eos_token_id=list(eos_ids), bos_token_id=eos_ids[-1], pad_token_id=eos_ids[-1],
    )


def new_model(config, seed: int):
    """A freshly initialised ``Qwen3_5ForCausalLM`` (float32), the same for the same seed."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    torch.manual_seed(seed)
    return Qwen3_5ForCausalLM(config)


class Windows:
    """Training windows of ``SEQ_LEN + 1`` tokens in a seeded order (a new one after each pass over a
    language's windows), each batch holding the languages in the proportions of ``shares`` (the same number
    of each when it is not given)."""

    def __init__(self, streams: dict[str, torch.Tensor], seed: int, seq_len: int = SEQ_LEN,
                 shares: dict[str, int] | None = None) -> None:
        self.seq_len = seq_len
        self.generator = torch.Generator().manual_seed(seed)
        self.streams = list(streams.values())
        self.shares = [1 if shares is None else shares[name] for name in streams]
        self.starts = [torch.arange(0, len(s) - seq_len - 1, seq_len) for s in self.streams]
        self.orders = [torch.randperm(len(s), generator=self.generator) for s in self.starts]
        self.positions = [0] * len(self.streams)

    def takes(self, size: int) -> list[int]:
        """How many of ``size`` windows each language gives: in proportion to its share, rounded down, the
        rest from the first language."""
        takes = [size * share // sum(self.shares) for share in self.shares]
        takes[0] += size - sum(takes)
        return takes

    def batch(self, size: int) -> torch.Tensor:
        """The next ``size`` windows ``[size, SEQ_LEN + 1]``, as ``takes(size)`` says per language."""
        rows = []
        for i, (stream, starts, take) in enumerate(zip(self.streams, self.starts, self.takes(size))):
            if self.positions[i] + take > len(self.orders[i]):
                self.orders[i], self.positions[i] = torch.randperm(len(starts), generator=self.generator), 0
            chosen = starts[self.orders[i][self.positions[i]: self.positions[i] + take]]
            self.positions[i] += take
            rows += [stream[s: s + self.seq_len + 1] for s in chosen.tolist()]
        return torch.stack(rows)


class MixedWindows:
    """Half of each batch from ``corpus`` (training windows), half from ``generated`` (rows of the target's
    own text, in a seeded order, a new one after each pass)."""

    def __init__(self, corpus: Windows, generated: torch.Tensor, seed: int) -> None:
        self.corpus, self.generated = corpus, generated
        self.generator = torch.Generator().manual_seed(seed)
        self.order, self.position = torch.randperm(len(generated), generator=self.generator), 0

    def batch(self, size: int) -> torch.Tensor:
        take = size // 2
        if self.position + take > len(self.order):
            self.order, self.position = torch.randperm(len(self.generated), generator=self.generator), 0
        rows = self.generated[self.order[self.position: self.position + take]]
        self.position += take
        return torch.cat([self.corpus.batch(size - take), rows])


def opening_starts(stream: torch.Tensor, count: int, eot: int, generator: torch.Generator) -> list[int]:
    """``count`` seeded places in ``stream`` to open a continuation: half of them document starts (the token
    after an ``<|endoftext|>``: a play's title, a poem's title and author), half anywhere."""
    last = len(stream) - PROMPT_TOKENS
    documents = (stream[:last - 1] == eot).nonzero().flatten() + 1
    picked = documents[torch.randint(0, len(documents), (count // 2,), generator=generator)]
    anywhere = torch.randint(0, last, (count - count // 2,), generator=generator)
    return torch.cat([picked, anywhere]).tolist()


@torch.no_grad()
def target_text(target, streams: dict[str, torch.Tensor], counts: dict[str, int], seed: int, eot: int,
                batch: int = 64) -> torch.Tensor:
    """``[sum(counts), SEQ_LEN + 1]``: the target's greedy continuations of ``counts[language]`` openings of
    ``PROMPT_TOKENS`` training tokens of each language (``opening_starts``).

    A draft is asked, at decode time, to predict the target's own text; training it on much of that text
    (sequence-level distillation, as production drafts are trained) teaches it where the target goes, not
    only where the corpus goes. ``min_new_tokens`` keeps every row full length (no early stop at
    ``<|endoftext|>``).
    """
    generator = torch.Generator().manual_seed(seed)
    new_tokens = SEQ_LEN + 1 - PROMPT_TOKENS
    rows = []
    for language, stream in streams.items():
        starts = opening_starts(stream, counts[language], eot, generator)
        openings = torch.stack([stream[s: s + PROMPT_TOKENS] for s in starts])
        for chunk in openings.split(batch):
            rows.append(target.generate(chunk, attention_mask=torch.ones_like(chunk), do_sample=False,
                                        max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                        pad_token_id=target.config.pad_token_id))
    return torch.cat(rows)


def next_token_loss(model, x: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=x[:, :-1], use_cache=False).logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


def distillation_loss(teacher) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    """KL(teacher || student) per token, over the whole vocabulary, from the teacher's logits."""

    def loss(student, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            target = F.log_softmax(teacher(input_ids=x[:, :-1], use_cache=False).logits.float(), dim=-1)
        logits = student(input_ids=x[:, :-1], use_cache=False).logits.float()
        log_p = F.log_softmax(logits, dim=-1)
        return F.kl_div(log_p.reshape(-1, log_p.shape[-1]), target.reshape(-1, target.shape[-1]),
                        log_target=True, reduction="batchmean")

    return loss


def residual_dropout(model, p: float) -> list[Any]:
    """Dropout on the output of every token mixer and MLP, before it joins the residual stream; returns the
    hooks' handles (remove them when training ends).

    transformers' Qwen3.5 has no dropout there (only on attention weights); a corpus of a few megabytes read
    for several passes needs it, or the model learns the training text rather than the language.
    """

    def hook(module, _inputs, output):
        if isinstance(output, tuple):  # full attention returns (output, weights)
            return (F.dropout(output[0], p, module.training), *output[1:])
        return F.dropout(output, p, module.training)

    handles = []
    for layer in model.model.layers:
        mixer = layer.linear_attn if hasattr(layer, "linear_attn") else layer.self_attn
        handles += [mixer.register_forward_hook(hook), layer.mlp.register_forward_hook(hook)]
    return handles


def train(model, windows: Windows, schedule: Schedule, loss_fn, name: str, evaluate=None,
          eval_every: int = 0, stop_after: int | None = None) -> dict[str, Any]:
    """AdamW over ``schedule.steps`` batches (or only the first ``stop_after`` of them), the forward and
    backward passes under ``COMPUTE`` autocast; returns the loss curve, held-out points and wall time."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=schedule.peak_lr, betas=(0.9, 0.95),
                                  weight_decay=0.1)
    hooks = residual_dropout(model, schedule.dropout) if schedule.dropout else []
    curve, points, running, started = [], [], [], time.perf_counter()
    model.train()
    for step in range(schedule.steps if stop_after is None else stop_after):
        for group in optimizer.param_groups:
            group["lr"] = schedule.lr(step)
        with torch.autocast("cpu", dtype=COMPUTE):
            loss = loss_fn(model, windows.batch(schedule.batch))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        running.append(loss.item())
        if (step + 1) % LOG_EVERY == 0 or step + 1 == schedule.steps:
            curve.append([step + 1, round(sum(running) / len(running), 4)])
            running = []
            print(f"{name} step {step + 1}/{schedule.steps} loss {curve[-1][1]:.4f} "
                  f"lr {schedule.lr(step):.2e} {time.perf_counter() - started:.0f} s", flush=True)
        if evaluate is not None and eval_every and (step + 1) % eval_every == 0 and step + 1 < schedule.steps:
            model.eval()
            points.append({"step": step + 1, **evaluate(model)})
            print(f"{name} held-out {points[-1]}", flush=True)
            save_partial(model, name, step + 1)
            model.train()
    for handle in hooks:
        handle.remove()
    model.eval()
    return {"loss_every": LOG_EVERY, "loss": curve, "held_out_during": points,
            "wall_s": round(time.perf_counter() - started, 1)}


def save_partial(model, name: str, step: int) -> None:
    """An intermediate copy of the weights under ``.cache/train-run/`` (never committed)."""
    from safetensors.torch import save_file

    RUN_CACHE.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(RUN_CACHE / f"{name}-step{step}.safetensors"))


# ---------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------


@torch.no_grad()
def bits_per_char(model, stream: torch.Tensor, chars: list[int], max_tokens: int,
                  seq_len: int = SEQ_LEN) -> dict[str, float]:
    """Cross-entropy of ``stream``'s first ``max_tokens`` tokens in windows of ``seq_len``, per character.

    Each window starts from an empty context; its first token is not scored. Predicting
    ``<|endoftext|>`` counts in the bits but adds no character.
    """
    stream = stream[: max_tokens]
    windows = stream[: len(stream) // seq_len * seq_len].view(-1, seq_len)
    per_char = torch.tensor(chars, dtype=torch.float64)
    nats, characters, tokens = 0.0, 0.0, 0
    for batch in windows.split(8):
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits.float()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum")
        nats += nll.item()
        characters += per_char[batch[:, 1:]].sum().item()
        tokens += batch[:, 1:].numel()
    return {"bits_per_char": round(nats / math.log(2) / characters, 4),
            "nats_per_token": round(nats / tokens, 4), "tokens": tokens, "chars": int(characters)}


def evaluator(streams: dict[str, torch.Tensor], chars: list[int], max_tokens: int):
    def evaluate(model) -> dict[str, float]:
        return {name: bits_per_char(model, stream, chars, max_tokens)["bits_per_char"]
                for name, stream in streams.items()}

    return evaluate


# ---------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    return sha256_bytes(path.read_bytes())


def cpu_model() -> str:
    """``lscpu``'s model name (the machine the figures come from)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        lines = [line for line in out.splitlines() if line.startswith("Model name")]
        return lines[0].split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        return platform.processor() or "unknown"


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@torch.no_grad()
def bf16_copy(model):
    """The model as it is committed: its parameters rounded to bfloat16, kept in float32 to compute.

    Only the parameters: the rotary frequencies (a buffer) stay float32, as every loader computes them.
    """
    for param in model.parameters():
        param.copy_(param.to(torch.bfloat16))
    return model


def write_model(model, tokenizer, folder: Path, record: dict[str, Any]) -> None:
    """The Hugging Face layout in bfloat16, the tokenizer files and ``training.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(tokenizer), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    record = dict(record, weights_sha256=file_sha256(folder / "model.safetensors"),
                  tokenizer_sha256=file_sha256(folder / "tokenizer.json"))
    (folder / "training.json").write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n",
                                          encoding="utf-8")


def shares_text(shares: dict[str, int]) -> str:
    """``{"en": 2, "zh": 1}`` -> ``"2 English windows to 1 Chinese"``; equal shares -> ``"as many English
    windows as Chinese"``."""
    names = {"en": "English", "zh": "Chinese"}
    if len(set(shares.values())) == 1:
        first, *rest = (names[lang] for lang in shares)
        return f"as many {first} windows as " + " and ".join(rest)
    return " to ".join(f"{n} {names[lang]}" + (" windows" if i == 0 else "")
                       for i, (lang, n) in enumerate(shares.items()))


def base_record(corpus, config, seed: int, schedule: Schedule, commit: str,
                shares: dict[str, int] = SHARES) -> dict[str, Any]:
    import transformers

    from site_scripts.corpora import ARCHIVES

    return {
        "corpora": [{"registry": a.registry, "name": a.name, "version": a.version, "file": a.file,
                     "sha256": a.sha256, "licence": a.licence} for a in ARCHIVES],
        "sources": corpus.sources,
        "config": {k: v for k, v in config.to_dict().items() if k not in ("transformers_version",)},
        "parameters": None, "seed": seed,
        "schedule": {"steps": schedule.steps, "peak_lr": schedule.peak_lr, "warmup": schedule.warmup,
                     "batch": schedule.batch, "seq_len": SEQ_LEN, "dropout": schedule.dropout,
                     "shares": shares, "mix": shares_text(shares),
                     "optimizer": "AdamW(0.9, 0.95), weight decay 0.1, "
                     "clip 1.0, cosine to 10 %",
                     "compute": f"{str(COMPUTE).removeprefix('torch.')} autocast, float32 weights"},
        "tokens_seen": schedule.steps * schedule.batch * SEQ_LEN,
        "cpu": cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__,
        "transformers": transformers.__version__, "python": platform.python_version(),
        "command": "python -m site_scripts.train_models", "commit": commit,
    }


# ---------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    target: Schedule
    draft: Schedule
    eval_tokens: int
    final_eval_tokens: int
    eval_every: int
    generated_rows: dict[str, int]  # windows of the target's own text, per language, for distilling the draft


# The draft's Chinese is where it agrees least with the target (a character among many plausible ones), so
# four fifths of the target's text it learns from is Chinese.
FULL = Plan(Schedule(3300, 3e-3, 100, batch=18, dropout=0.1), Schedule(2000, 3e-3, 60), 8192, 32768, 300,
            {"en": 1024, "zh": 4096})
SMOKE = Plan(Schedule(6, 2e-3, 2, batch=6, dropout=0.1), Schedule(4, 3e-3, 2), 1024, 2048, 3,
             {"en": 2, "zh": 2})


def prepare(limit_docs: int | None = None):
    """The corpus, the tokenizer trained on it, and the token streams: training, held-out, unseen."""
    from site_scripts.corpora import load_corpus

    corpus = load_corpus()
    train_docs = {lang: docs[:limit_docs] for lang, docs in corpus.train.items()}
    tokenizer = train_tokenizer([d for docs in train_docs.values() for d in docs])
    streams = {lang: token_stream(tokenizer, docs) for lang, docs in train_docs.items()}
    held = {f"held_out_{lang}": token_stream(tokenizer, docs) for lang, docs in corpus.held_out.items()}
    unseen = {f"unseen_{lang}": token_stream(tokenizer, docs) for lang, docs in corpus.unseen.items()}
    print({k: len(v) for k, v in {**streams, **held, **unseen}.items()}, flush=True)
    return corpus, tokenizer, streams, held, unseen


def rescore(folder: Path, scores: dict[str, Any]) -> None:
    """Replace the scores of a written record with those of the model read back from its files."""
    path = folder / "training.json"
    made = json.loads(path.read_text(encoding="utf-8"))
    made.update(scores=scores, scored="from the bfloat16 files as written (rotary frequencies in float32)")
    path.write_text(json.dumps(made, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def run(output: Path, plan: Plan, seed: int, limit_docs: int | None = None,
        drafts_only: bool = False, drafts: Sequence[str] = DRAFTS) -> dict[str, Any]:
    """Every stage; with ``drafts_only`` only the ``drafts`` named, the target read from ``output/target``
    (as written by an earlier run: a draft then learns from exactly the weights it would have learnt from in
    one run, and the corpus-only draft, which does not read the target, can train beside the target)."""
    torch.set_num_threads(THREADS)
    started, commit = time.perf_counter(), git_commit()  # the code that trains
    corpus, tokenizer, streams, held, unseen = prepare(limit_docs)
    chars = token_chars(tokenizer)
    eos = [tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")]
    evaluate = evaluator(held, chars, plan.eval_tokens)

    def final_scores(model) -> dict[str, Any]:
        return {name: bits_per_char(model, stream, chars, plan.final_eval_tokens)
                for name, stream in {**held, **unseen}.items()}

    results: dict[str, Any] = {}
    if drafts_only and "draft" in drafts:
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

        while not (output / "target" / "training.json").is_file():  # a target still training elsewhere
            time.sleep(10)
        target = Qwen3_5ForCausalLM.from_pretrained(output / "target", dtype=torch.float32).eval()
        rescore(output / "target", final_scores(target))
    elif not drafts_only:
        target_config = model_config(TARGET_SHAPE, tokenizer.get_vocab_size(), eos)
        target = new_model(target_config, seed)
        target_run = train(target, Windows(streams, seed, shares=SHARES), plan.target, next_token_loss,
                           "target", evaluate, plan.eval_every)
        target = bf16_copy(target)
        target_record = base_record(corpus, target_config, seed, plan.target, commit)
        target_record.update(parameters=sum(p.numel() for p in target.parameters()), training=target_run,
                             objective="next-token cross-entropy", scores=final_scores(target),
                             scored="from the bfloat16 weights (rotary frequencies in float32)",
                             train_tokens={k: len(v) for k, v in streams.items()})
        write_model(target, tokenizer, output / "target", target_record)
        results["target"] = target_record

    draft_config = model_config(DRAFT_SHAPE, tokenizer.get_vocab_size(), eos)
    for name in drafts:
        windows = Windows(streams, seed + 1, shares=DRAFT_SHARES)
        if name == "draft":
            generating = time.perf_counter()
            generated = target_text(target, streams, plan.generated_rows, seed + 2,
                                    eot=tokenizer.token_to_id("<|endoftext|>"))
            print(f"target text: {tuple(generated.shape)} in {time.perf_counter() - generating:.0f} s",
                  flush=True)
            windows, loss_fn = MixedWindows(windows, generated, seed + 3), distillation_loss(target)
        else:
            loss_fn = next_token_loss
        draft = new_model(draft_config, seed + 1)
        draft_run = train(draft, windows, plan.draft, loss_fn, name, evaluate, plan.eval_every)
        draft = bf16_copy(draft)
        record = base_record(corpus, draft_config, seed + 1, plan.draft, commit, shares=DRAFT_SHARES)
        if name == "draft":
            counts = ", ".join(f"{n} {lang}" for lang, n in plan.generated_rows.items())
            record["schedule"]["generated_rows"] = plan.generated_rows
            record["schedule"]["mix"] = (
                f"half training windows ({shares_text(DRAFT_SHARES)}), half the bfloat16 target's greedy "
                f"continuations of training-text openings of {PROMPT_TOKENS} tokens ({counts}; half at "
                f"document starts; seed {seed + 2})")
        record.update(parameters=sum(p.numel() for p in draft.parameters()), training=draft_run,
                      objective=("KL(target || draft) over the vocabulary, from the bfloat16 target's logits"
                                 if name == "draft" else "next-token cross-entropy (the corpus alone)"),
                      scores=final_scores(draft), train_tokens={k: len(v) for k, v in streams.items()})
        folder = output / name if name == "draft" else RUN_CACHE / name
        write_model(draft, tokenizer, folder, record)
        if name != "draft":  # its weights stay in the cache; its record is committed beside the draft
            output.mkdir(parents=True, exist_ok=True)
            (output / f"{name}-training.json").write_text((folder / "training.json").read_text("utf-8"),
                                                          encoding="utf-8")
        results[name] = record
    print(f"done in {time.perf_counter() - started:.0f} s", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m site_scripts.train_models",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("output", nargs="?", type=Path, default=OUTPUT, help="folder for target/ and draft/")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--smoke", action="store_true", help="a few steps of every stage (checks the code)")
    parser.add_argument("--drafts-only", action="store_true",
                        help="train only the drafts, from the target already in OUTPUT/target")
    parser.add_argument("--draft", choices=DRAFTS, action="append",
                        help="with --drafts-only: train only this draft (repeatable; default both)")
    parser.add_argument("--check", type=int, metavar="STEPS",
                        help="train the target for STEPS steps, compare with OUTPUT/target/training.json and "
                        "write what it found to OUTPUT/target-check.json (exit 1 if one is over 2%% off)")
    args = parser.parse_args(argv)
    if args.check:
        return check_against_record(args.output / "target", args.check)
    run(args.output, SMOKE if args.smoke else FULL, args.seed, limit_docs=200 if args.smoke else None,
        drafts_only=args.drafts_only, drafts=args.draft or DRAFTS)
    return 0


def check_against_record(folder: Path, steps: int) -> int:
    """Retrain the first ``steps`` steps with the record's seed; compare tokenizer, loss curve and held-out
    bits per character (at the recorded points up to ``steps``: ``--check 300`` reaches the first) with it.

    Prints each logged figure beside the recorded one and writes them to ``target-check.json`` beside
    ``folder``; exits 1 if the tokenizer differs or a figure differs by more than 2 %.
    """
    made = json.loads((folder / "training.json").read_text(encoding="utf-8"))
    torch.set_num_threads(made["threads"])  # the same reductions in the same order as the recorded run
    _, tokenizer, streams, held, _ = prepare()
    scratch = RUN_CACHE / "check-tokenizer.json"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(scratch))
    same_tokenizer = file_sha256(scratch) == made["tokenizer_sha256"]
    eos = [tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")]
    model = new_model(model_config(TARGET_SHAPE, tokenizer.get_vocab_size(), eos), made["seed"])
    keys = ("steps", "peak_lr", "warmup", "batch", "dropout")
    schedule = Schedule(**{k: made["schedule"][k] for k in keys})
    windows = Windows(streams, made["seed"], shares=made["schedule"]["shares"])
    evaluate = evaluator(held, token_chars(tokenizer), FULL.eval_tokens)
    run = train(model, windows, schedule, next_token_loss, "check", evaluate, FULL.eval_every,
                stop_after=steps)
    recorded = dict((step, loss) for step, loss in made["training"]["loss"])
    pairs = [(f"step {step}: loss", loss, recorded[step]) for step, loss in run["loss"]]
    points = {point["step"]: point for point in made["training"]["held_out_during"]}
    pairs += [(f"step {point['step']}: {key}", point[key], points[point["step"]][key])
              for point in run["held_out_during"] for key in point if key != "step"]
    worst = 0.0
    for what, got, then in pairs:
        worst = max(worst, abs(got - then) / then)
        print(f"{what} {got:.4f}, recorded {then:.4f}")
    print(f"tokenizer {'identical' if same_tokenizer else 'DIFFERENT'}; largest difference {worst:.2%}")
    passed = same_tokenizer and worst <= 0.02
    # The rerun's own record, beside the one it checks: the pages' reproducibility sentence comes from it.
    check = {"steps": steps, "cpu": cpu_model(), "threads": torch.get_num_threads(),
             "torch": torch.__version__, "commit": git_commit(), "same_tokenizer": same_tokenizer,
             "largest_difference": round(worst, 5), "passed": passed,
             "compared": [{"what": what, "rerun": round(got, 4), "recorded": round(then, 4)}
                          for what, got, then in pairs],
             "command": f"python -m site_scripts.train_models --check {steps}"}
    (folder.parent / "target-check.json").write_text(json.dumps(check, ensure_ascii=False, indent=1) + "\n",
                                                     encoding="utf-8")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
