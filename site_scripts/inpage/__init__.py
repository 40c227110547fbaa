"""The in-page runs: the zip of engine files a page ships, the MkDocs hook that adds the Run buttons, the
worker's Python side, and the measured load and run times the contributing page shows.
"""
