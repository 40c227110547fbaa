"""The trained-models page: the committed target's and draft's training records and measurements as tables,
and their loss curves. Non-scope: training them (the ``training`` package).
"""
