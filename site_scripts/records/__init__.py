"""The run-records pages and the contributing page's measurements: the committed run records, what ran where
(status), the reliability tables, the test suite's timings and the map of the repository's rooms.
"""
