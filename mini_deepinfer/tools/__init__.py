"""What the commands share: the one-line-error parser, run records, checks, file writing, checkpoint writers.

Scope: ``cli`` (one-line errors and exit codes), ``records`` (the run record of ``--output``), ``checks``
(``check_greedy``, ``cold_difference``), ``files`` (folders that appear only when complete), ``checkpoints``
and ``tokenizer_files`` (random and perturbed checkpoints in the released layout). Non-scope: the engine and
the models themselves; no command lives here.
"""
