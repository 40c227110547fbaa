"""Lesson 9 (``parameter_name``, ``load_checkpoint``): mistakes a learner mapping names and loading a
checkpoint would make."""

from __future__ import annotations

from . import mistake

TEXT = """    if checkpoint_name.startswith(TEXT_PREFIX):
        return "model." + checkpoint_name[len(TEXT_PREFIX) :]
"""
CHECK = "    check_tensors(expected_tensors(build_model(config, dtype, \"meta\")), sources, config, folder)\n"

MISTAKES = (
    mistake("the text model's prefix is kept: no Qwen3.5 parameter is found", (TEXT, "")),
    mistake("the prefix is cut off entirely instead of becoming model.",
            ('return "model." + checkpoint_name[len(TEXT_PREFIX) :]',
             "return checkpoint_name[len(TEXT_PREFIX) :]")),
    mistake("the vision tower and the MTP head are not skipped",
            ("    if checkpoint_name.startswith(IGNORED_PREFIXES):\n        return None\n", "")),
    mistake("a skipped tensor gets the empty name instead of None, so the loader indexes it",
            ("        return None\n", "        return \"\"\n")),
    mistake("no check before reading: an unknown tensor is ignored, a wrong shape fails while copying",
            (CHECK, "")),
    mistake("the parameters are counted from the state dict: a tied head counts twice",
            ("count = sum(t.numel() for t in expected.values())",
             "count = sum(t.numel() for t in model.state_dict().values())")),
    mistake("the model is always built in float32, whatever dtype was asked for",
            ("    model = build_model(config, dtype, device)\n",
             "    model = build_model(config, torch.float32, device)\n")),
)
