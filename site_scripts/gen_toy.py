"""Terminal output of the toy demo (``python -m mini_deepinfer``), shown in lessons 1, 2 and 10."""

from __future__ import annotations

from site_scripts.regenerate import run_module

OUTPUTS = {
    "toy/demo.txt": lambda: run_module("mini_deepinfer"),
    "toy/cancel.txt": lambda: run_module("mini_deepinfer", "--cancel", "req-0", "--cancel-after-round", "2"),
    "toy/pipeline.txt": lambda: run_module("mini_deepinfer", "--pipeline"),
}
