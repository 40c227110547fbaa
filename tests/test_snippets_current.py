"""The generated files under snippets/ are current: regenerating them changes nothing.

Scope: running every generator of ``site_scripts/gen_*.py`` (``python -m site_scripts.regenerate --check``)
and comparing with the files the pages include. Non-scope: what the generators write (their owners test
that).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_regenerating_snippets_changes_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "site_scripts.regenerate", "--check"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )
    assert proc.returncode == 0, f"stale snippets; run `make snippets`:\n{proc.stdout}{proc.stderr}"
