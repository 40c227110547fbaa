"""The site's machinery, no page of its own: regenerating snippets/, the MkDocs and Griffe hooks, fetching the
DeepInfer sdist and the Pyodide runtime, and the helpers every generator shares (running a command, reading
JSON).
"""
