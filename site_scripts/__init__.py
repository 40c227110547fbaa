"""Build-time scripts for the site: the generators that write snippets/, and the MkDocs hooks.

Nothing here is part of the engine package; `mini_deepinfer` never imports it.
"""
