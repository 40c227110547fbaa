"""The words of the site's pictures, in Chinese (``zh``) and English (``en``).

Scope: one dict per picture, ``{"en": {...}, "zh": {...}}``, with the same keys in both languages, read from
the family's ``words.toml`` (each label's two languages side by side there). A value with ``{name}`` fields is
formatted with the picture's numbers; every other value appears in the picture as it is (a test checks that).
Non-scope: drawing (``*_picture.py``, ``charts.py``).
"""

from __future__ import annotations

from site_scripts.build.common import phrases

ABC = phrases(__name__)["abc"]

TIMELINE = phrases(__name__)["timeline"]

SPECULATIVE = phrases(__name__)["speculative"]

ROUNDS_CHART = phrases(__name__)["rounds_chart"]

SPECULATIVE_CHART = phrases(__name__)["speculative_chart"]

TRANSFORMERS_CHART = phrases(__name__)["transformers_chart"]

MEASURED_TIMELINE = phrases(__name__)["measured_timeline"]  # gen_timeline.py: spans of measured rounds
