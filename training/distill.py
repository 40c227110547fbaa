"""Step 4 of training: distilling the draft from the target, on the target's logits and on its own text.

Scope: the places in the training text where the target opens a continuation (half at a document's start),
the target's greedy continuations of those openings (sequence-level distillation: at decode time a draft has
to predict the target's own text, not the corpus), batches that are half training windows and half that
text, and the loss: KL(target || draft) over the whole vocabulary, from the target's logits.

Non-scope: the loop that minimises the loss (``loop.py``), rounding the target to bfloat16 before it teaches
(``record.py``), how often the draft then agrees with the target (``evaluate.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from training.loop import SEQ_LEN, Windows

PROMPT_TOKENS = 33  # an opening of training text that the target continues to a window of SEQ_LEN + 1


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


# --8<-- [start:distillation_loss]
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
# --8<-- [end:distillation_loss]
