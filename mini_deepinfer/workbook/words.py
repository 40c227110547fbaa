"""Text in the learner's language: every message the workbook prints exists in English and Chinese.

Scope: :class:`Words` (one message in both languages) and :func:`default_language` (from the locale).
Non-scope: the lessons' hints themselves (``lessons.py``) and the pages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LANGUAGES = ("en", "zh")


@dataclass(frozen=True)
class Words:
    """One message, in English and in Chinese."""

    en: str
    zh: str

    def __call__(self, lang: str) -> str:
        return self.zh if lang == "zh" else self.en

    def format(self, **values: object) -> Words:
        return Words(self.en.format(**values), self.zh.format(**values))


def default_language(environ: dict[str, str] | None = None) -> str:
    """``zh`` when the locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG``, first set) is Chinese, else ``en``."""
    env = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name, "")
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"
