"""The performance page: the benchmark tables, their Chinese, the operator counts, and the script that runs
the benchmarks on a lent GPU machine. Non-scope: running a benchmark (``mini_deepinfer.bench``).
"""
