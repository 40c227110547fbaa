"""The printouts of the lessons, the walkthroughs and the quick start: the demos' terminal output and tables.

One generator per subject (``gen_toy``: lessons 1, 2 and the quick start; ``gen_runner``: lesson 5; ...); each
module's first line names the pages it feeds. Non-scope: the pictures beside those outputs (``pictures/``).
"""
