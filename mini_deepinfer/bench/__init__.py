"""Benchmark commands: each module is one ``python -m mini_deepinfer.bench.<name>`` measurement.

Every command runs a fixed, seeded workload, checks that the modes it compares give the same tokens,
and writes its timings as JSON (device, dtype, torch version, date, config, results) under
``snippets/bench/``. Timings change from run to run, so the site shows the committed JSON files and
never regenerates them.
"""
