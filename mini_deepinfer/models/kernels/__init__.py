"""The maths under the model modules, apart from them, each fast path beside its plain reference.

Scope: ``deltanet`` (the causal convolution and the gated delta rule of Qwen3.5's linear attention),
``norm`` (RMSNorm and L2 normalisation in few kernels), ``cpu`` (paths that are faster only on a CPU).
Every function whose name ends in ``_ref`` is the textbook form of the function without the suffix;
``tests/test_kernels.py`` compares each pair (the chunked delta rule: ``tests/test_qwen3_5_parity.py``).

Non-scope: modules and parameters (``layers.py``, ``qwen3_5.py``, ``qwen2.py``), attention (``layers.py``).
"""
