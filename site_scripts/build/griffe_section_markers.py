"""A Griffe extension: hide the snippet section markers from the API reference's source views.

Scope: the pages embed parts of the package with pymdownx.snippets, which finds them by comment lines such as
``# --8<-- [start:step]`` and ``# --8<-- [end:step]`` in the package's files. Those lines mean nothing to a
reader of the API reference, so after Griffe has loaded a package this extension blanks them in the source
lines that mkdocstrings shows (mkdocs.yml lists it under the mkdocstrings ``extensions`` option). A blanked
line stays in place, so the line numbers of the source views still match the files.
Non-scope: the files themselves (the markers stay there; the pages need them), docstrings, signatures.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

SECTION_MARKER = re.compile(r"^\s*#\s*-{1,}8<-{1,}\s*\[(?:start|end):[\w-]+\]\s*$")


def blank_markers(lines: list[str]) -> int:
    """Replace every section-marker line of ``lines`` by an empty line, in place; return how many."""
    count = 0
    for i, line in enumerate(lines):
        if SECTION_MARKER.match(line):
            lines[i] = ""
            count += 1
    return count


class HideSectionMarkers(griffe.Extension):
    """Blank the ``# --8<-- [start:x]`` / ``[end:x]`` lines of every file of a loaded package."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for lines in loader.lines_collection.values():
            blank_markers(lines)
