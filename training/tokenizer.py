"""Step 2 of training: the byte-level BPE tokenizer both models share, and the text as token ids.

Scope: training a byte-level BPE tokenizer (``tokenizers``) on the training text of both languages, with
Qwen's pre-tokenizer pattern and its special tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``; its
``tokenizer_config.json`` (special-token roles, the chat template); how many characters each token completes
(the denominator of bits per character, ``evaluate.py``); and a list of documents as one stream of ids.

Non-scope: where the text comes from (``corpora.py``), cutting the stream into training windows (``loop.py``),
writing the tokenizer's files (``record.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mini_deepinfer.tools.tokenizer_files import QWEN3_5_CHAT_TEMPLATE, QWEN3_5_PATTERN, byte_to_unicode

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
VOCAB_SIZE = 4096


# --8<-- [start:train_tokenizer]
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
# --8<-- [end:train_tokenizer]


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


# --8<-- [start:token_chars]
def token_chars(tokenizer) -> list[int]:
    """For each token id, how many characters it completes (UTF-8 lead bytes it holds); 0 for specials."""
    to_byte = {ch: b for b, ch in byte_to_unicode().items()}
    counts = [0] * tokenizer.get_vocab_size()
    for token, index in tokenizer.get_vocab().items():
        if token in SPECIAL_TOKENS:
            continue
        counts[index] = sum(1 for ch in token if (to_byte[ch] & 0xC0) != 0x80)
    return counts
# --8<-- [end:token_chars]


def token_stream(tokenizer, documents: Sequence[str]) -> torch.Tensor:
    """All documents as one id tensor, each followed by ``<|endoftext|>``."""
    eot = tokenizer.token_to_id("<|endoftext|>")
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(list(documents)):
        ids += encoding.ids
        ids.append(eot)
    return torch.tensor(ids, dtype=torch.long)


def stop_ids(tokenizer) -> list[int]:
    """The ids the models stop on: ``<|im_end|>`` (a chat turn's end), then ``<|endoftext|>``."""
    return [tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")]
