"""The committed records the trained-models page reads: the models' training records and their measurements.

Scope: where they are (``trained/``), the two languages the models were trained and measured on, and reading
``trained/<model>/training.json`` (:func:`record`) and ``trained/measurements.json`` (:func:`measurements`);
the figures the pages show computed from the records' counts (:func:`per_round`, :func:`share`), so that
each is rounded once, where a page writes it, and agrees with the counts beside it.
Non-scope: writing them (the ``training`` package), what the page makes of them (``gen_trained.py``,
``sentences.py``, ``gen_trained_pictures.py``).
"""

from __future__ import annotations

from typing import Any

from site_scripts.build.common import ROOT, read_json

TRAINED = ROOT / "trained"
LANGUAGES = {"en": "English", "zh": "Chinese"}


def record(name: str) -> dict[str, Any]:
    path = TRAINED / f"{name}-training.json" if name.endswith("corpus-only") else \
        TRAINED / name / "training.json"
    return read_json(path)


def measurements() -> dict[str, Any]:
    return read_json(TRAINED / "measurements.json")


def per_round(got: dict[str, Any]) -> float:
    """Draft tokens accepted per verify round, from an acceptance entry's counts (never its rounded copy)."""
    return got["accepted"] / got["verify_rounds"]


def share(got: dict[str, Any], part: str, whole: str) -> float:
    """``got[part] / got[whole]``: a share from the counts of a record's entry (accepted of proposed, agree
    of tokens, distinct of all 4-grams)."""
    return got[part] / got[whole]


def agreed(got: dict[str, Any]) -> float:
    """The share of an agreement entry's tokens where the draft's argmax is the target's token."""
    return share(got, "agree", "tokens")
