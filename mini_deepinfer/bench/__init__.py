"""Benchmark commands: ``python -m mini_deepinfer.bench`` (our engine against transformers on one
checkpoint), ``python -m mini_deepinfer.bench.rounds`` (synchronous against cross-round) and
``python -m mini_deepinfer.bench.speculative`` (speculative against plain decoding); ``common`` holds what
the last two share.

Every command runs a fixed, seeded workload, checks that the modes it compares give the same tokens,
and writes its timings as JSON (device, dtype, torch version, date, config, results) under
``snippets/bench/``. Timings change from run to run, so the site shows the committed JSON files and
never regenerates them.
"""
