"""The committed records the trained-models page reads: the models' training records and their measurements.

Scope: where they are (``trained/``), the two languages the models were trained and measured on, and reading
``trained/<model>/training.json`` (:func:`record`) and ``trained/measurements.json`` (:func:`measurements`).
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
