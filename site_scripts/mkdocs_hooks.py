"""MkDocs hooks: the glue between mkdocs-static-i18n, mkdocs-jupyter and mkdocstrings.

Scope: two fixes that the bilingual build needs (mkdocs.yml lists this file under ``hooks:``). Non-scope:
anything that changes page content.

1. Notebooks. mkdocs-static-i18n rebuilds every file as a plain MkDocs ``File``, which drops mkdocs-jupyter's
   notebook wrapper; a plain file is a page only if ``mkdocs.utils.is_markdown_file()`` says so. Without the
   patch below every notebook would be published as raw JSON, and ``mkdocs build --strict`` would still pass.
2. API labels. mkdocstrings reads ``theme.language`` in its ``on_config`` (priority 0), before
   mkdocs-static-i18n switches the language (priority -100), so the English pages would get Chinese labels
   ("参数", "源代码位于"). The hook re-syncs the locale after the switch.

Both patches reach into internals of mkdocs 1.6 and mkdocstrings 1.0; pyproject.toml pins those versions.
"""

from __future__ import annotations

from typing import Any

import mkdocs.utils
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority

if ".ipynb" not in mkdocs.utils.markdown_extensions:
    mkdocs.utils.markdown_extensions = (*mkdocs.utils.markdown_extensions, ".ipynb")


@event_priority(-110)  # after mkdocs-static-i18n's on_config (-100)
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Give mkdocstrings the locale of the language being built."""
    plugin: Any = config.plugins.get("mkdocstrings")
    handlers = getattr(plugin, "_handlers", None)
    language = config.theme.get("language")
    if handlers is not None and language:
        handlers._locale = str(language).replace("_", "-")
    return config
