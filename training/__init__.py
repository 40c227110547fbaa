"""How the site's two small models under ``trained/`` are made: a chapter of its own, one file per step.

Read in this order:

1. ``corpora.py``: the text (two registry packages, pinned and checked), split into training, held-out and
   unseen text;
2. ``tokenizer.py``: the byte-level BPE tokenizer both models share, and the text as token ids;
3. ``loop.py``: the shapes, the training windows, the schedule and the training loop;
4. ``distill.py``: the draft learns from the target's logits and from the target's own text;
5. ``evaluate.py``: bits per character, speculative acceptance, repetition;
6. ``record.py``: the training record, and each model written in the Hugging Face layout beside it.

Then the commands that run them: ``run.py`` calls the steps in order for ``python -m training``
(``__main__.py``), ``check.py`` retrains the first steps and compares them with the record
(``python -m training --check 300``), and ``measure.py`` measures the committed models with this engine
(``python -m training.measure``).

Non-scope: the pages that show the records and measurements (``site_scripts``' trained-models generators);
the engine the models run on (``mini_deepinfer``). Nothing here runs in ``make test`` or ``make serve``: the
tests train a few steps on a committed excerpt (``tests/test_trained_models.py``).
"""
