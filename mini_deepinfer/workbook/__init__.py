"""The workbook: write the engine's functions yourself, lesson by lesson, and check them inside the engine.

Scope: fifteen exercises, one per lesson (``lessons.py``). For each, a starter generated from the engine's own
function (``starter.py``: signature, docstring, the lesson's hints, a body raising ``NotImplementedError``),
the learner's file loaded and swapped into the real engine in place of that function (``learner.py``), and a
check that runs the lesson's scenario with the learner's function and with the engine's own, then the lesson's
invariants, and reports in the learner's language (``checking.py``, ``checks/``). ``python -m
mini_deepinfer.workbook`` is the command (``list``, ``start``, ``check``, ``solution``, ``run``); the
capstone (``capstone.py``) runs ``generate`` with every function the learner has written.
Non-scope: teaching (the lesson pages do), grading beyond pass or fail, and running in the page (the in-page
runtime ships these modules and calls :func:`checking.check_source`).

Everything here imports only the standard library and the torch-free core, except the checks of the lessons
whose functions need torch, which import it when they run; so the page can run the core lessons' checks.
"""
