"""The run-records pages and the contributing page's measurements: the committed run records, what ran where
(status), the reliability tables and the test suite's timings.
"""
