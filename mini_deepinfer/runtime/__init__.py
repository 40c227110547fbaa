"""What runs a model for the engine: the model runner, sampling, speculative decoding, devices, text.

Scope: ``ModelRunner`` (a round plan to tensors, one forward, sampling on the device), ``sampling``,
``speculative/`` (verify, the draft model, the speculative runner), ``device`` (``--device`` and ``--dtype``),
``text`` (tokenizer, chat template, streaming detokenizer) and ``factory.build_engine``, the one place that
wires a model to an engine. Non-scope: deciding what runs (``core/``), the model maths (``models/``), the
commands. Importing this package imports none of its modules: each needs PyTorch, and commands import what
they use.
"""
