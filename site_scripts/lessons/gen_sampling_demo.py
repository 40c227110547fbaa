"""Lesson 8's printout: what each sampling setting does to a five-token distribution, and what a seed fixes.

Scope: (1) the distribution ``mini_deepinfer.runtime.sampling.probabilities`` gives for the logits
``log([0.4, 0.3, 0.15, 0.1, 0.05])`` under greedy, three temperatures, top-k, top-p and both cuts together;
(2) how ``sample`` turns one uniform number into one token (the cumulative distribution at temperature 1);
(3) eight draws of one request with seed 7, alone and as one row of a batch of four, against a fresh
generator with the same seed and with seed 8. Everything runs on the CPU and depends only on the seeds.
``python -m site_scripts.lessons.gen_sampling_demo`` prints the same text the generator writes.
Non-scope: the sampling code itself (``mini_deepinfer/sampling.py``), speculative acceptance (lesson 14).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.runtime.sampling import make_generator, probabilities, sample
from site_scripts.build.common import run_module

BASE = (0.4, 0.3, 0.15, 0.1, 0.05)
LOGITS = torch.tensor(BASE, dtype=torch.float64).log()
SETTINGS: dict[str, SamplingParams] = {
    "greedy (temperature 0)": SamplingParams(temperature=0.0),
    "temperature 1": SamplingParams(temperature=1.0),
    "temperature 0.5": SamplingParams(temperature=0.5),
    "temperature 2": SamplingParams(temperature=2.0),
    "top_k 2": SamplingParams(temperature=1.0, top_k=2),
    "top_p 0.75": SamplingParams(temperature=1.0, top_p=0.75),
    "top_k 3, top_p 0.8": SamplingParams(temperature=1.0, top_k=3, top_p=0.8),
}
DRAWS = 8
SEED = 7
# The other rows of the batch: different logits, parameters and seeds.
NEIGHBOURS = (
    (torch.tensor([2.0, 0.0, 1.0, -1.0, 0.5]), SamplingParams(temperature=0.0), None),
    (torch.tensor([0.0, 0.0, 0.0, 0.0, 3.0]), SamplingParams(temperature=0.7, seed=1), 1),
    (torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), SamplingParams(temperature=1.5, top_k=2, seed=2), 2),
)


def distributions() -> str:
    header = f"{'setting':<22}" + "".join(f"{f'token {i}':>9}" for i in range(len(BASE)))
    lines = [f"logits = log({list(BASE)})", "", header, "-" * len(header)]
    for label, params in SETTINGS.items():
        probs = probabilities(LOGITS, params)
        lines.append(f"{label:<22}" + "".join(f"{p:>9.3f}" for p in probs.tolist()))
    return "\n".join(lines) + "\n"


def one_draw() -> str:
    """The uniform number behind the first draw of seed 7 at temperature 1, and where it falls."""
    cdf = torch.cumsum(probabilities(LOGITS, SETTINGS["temperature 1"]), dim=0)
    u = float(torch.rand(1, generator=make_generator(SEED), dtype=torch.float64))
    token = int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64), right=True))
    cdf_text = ", ".join(f"{c:.2f}" for c in cdf.tolist())
    return (f"temperature 1: cumulative [{cdf_text}]; seed {SEED}'s first uniform u = {u:.4f} "
            f"-> token {token}\n")


def draws_alone(seed: int) -> list[int]:
    params, generator = SamplingParams(temperature=1.0, seed=seed), make_generator(seed)
    return [int(sample(LOGITS.float()[None], [params], [generator])) for _ in range(DRAWS)]


def draws_in_batch() -> list[int]:
    """Seed 7's tokens when it is row 1 of a batch of four, each row with its own generator."""
    mine = (LOGITS.float(), SamplingParams(temperature=1.0, seed=SEED), SEED)
    rows = [NEIGHBOURS[0], mine, NEIGHBOURS[1], NEIGHBOURS[2]]
    generators = [None if seed is None else make_generator(seed) for _, _, seed in rows]
    logits = torch.stack([row for row, _, _ in rows])
    params = [p for _, p, _ in rows]
    return [int(sample(logits, params, generators)[1]) for _ in range(DRAWS)]


def seeds() -> str:
    rows = {
        f"seed {SEED}, alone": draws_alone(SEED),
        f"seed {SEED}, row 1 of a batch of 4": draws_in_batch(),
        f"seed {SEED}, a new generator": draws_alone(SEED),
        f"seed {SEED + 1}, alone": draws_alone(SEED + 1),
    }
    lines = [f"{DRAWS} draws at temperature 1, one token per call:"]
    lines += [f"  {label:<32}{tokens}" for label, tokens in rows.items()]
    return "\n".join(lines) + "\n"


def main_text() -> str:
    return distributions() + "\n" + one_draw() + "\n" + seeds()


OUTPUTS: dict[str, Callable[[], str]] = {
    "sampling/demo.txt": lambda: run_module("site_scripts.lessons.gen_sampling_demo"),
}

if __name__ == "__main__":
    print(main_text(), end="")
