"""Each lesson's check: ``lesson_NN.py`` holds ``CHECKS``, the steps run in order (see ``checking.py``).

The first step compares a scenario run with the learner's functions against the same scenario with the
engine's own (the first differing round or token, in the lesson's words); the later steps are the lesson's
invariants. The core lessons' checks import no torch (``toy_scenes.py`` holds their shared scenarios).
"""
