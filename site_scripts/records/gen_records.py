"""Render the committed run records, ``snippets/records/*.json``, as Markdown for the run-records pages.

Scope: one Markdown block per record (``snippets/records/rendered/<name>.md``: the command, model and draft
model, device, source SHA, start time, every request's prompt, finish reason, output tokens and text,
committed groups where there are any, the slots at the end, the checks and their results, the timings, the
full configuration and the JSON itself), an index table of all records (``rendered/index.md``) and a file
that includes every record block (``rendered/all.md``). ``docs/records/index.md`` and its English twin
include the last two, so adding a record needs no page edit: commit the JSON, run
``python -m site_scripts.build.regenerate --only records``.

Non-scope: making records (the entry modules' ``--output``; ``mini_deepinfer.tools.records`` defines the
format) and checking them (the engine's tests do). The JSON files are committed artefacts and are never
rewritten here; only their rendering is regenerated. Timings are shown as recorded: they belong to that run on
that device.

Labels in the rendered Markdown are the record's own keys (``finish_reason``, ``source_sha``), so the same
files serve the Chinese and the English page and a reader can find each value in the JSON.

Whether the weights were random: a record may say so itself in ``model.weights``. Otherwise a model path
``weights/<preset>`` with a preset name of ``mini_deepinfer.random_checkpoint`` counts as a random
checkpoint, because that is where the site's commands write one; any other path is "not stated".

Provenance that a record does not carry: ``snippets/records/provenance.json`` (not a record itself) may
give, per record file, ``model.weights`` and ``draft_model.weights`` (where the weights came from),
``execution`` (how the rounds ran, for records written before the engine recorded it) and ``source`` (who
measured it and what was done to the file). It only fills gaps, so the measured JSON stays exactly as the run
wrote it: an entry for a file that is not committed, an unknown key, or a key the record already states is a
GeneratorError. The page says which statements come from that file and not from the record.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any

from site_scripts.build.common import SNIPPETS, GeneratorError, provenance_entries, read_json

RECORDS = SNIPPETS / "records"
RENDERED = "records/rendered"
PROVENANCE = RECORDS / "provenance.json"
PROVENANCE_KEYS = ("model.weights", "draft_model.weights", "execution", "source")
FROM_PROVENANCE = "stated in `snippets/records/provenance.json`, not in the record"
NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MISSING = "—"


def record_files() -> list[Path]:
    """The committed records, sorted by file name (``provenance.json`` is not one)."""
    return sorted(path for path in RECORDS.glob("*.json") if path != PROVENANCE)


def provenance(path: Path) -> dict[str, str]:
    """What ``provenance.json`` states about the record ``path`` (empty without an entry)."""
    entries = provenance_entries(PROVENANCE, "records", PROVENANCE_KEYS,
                                 {record.name for record in record_files()}, "record")
    return dict(entries.get(path.name, {}))


def stated(record: dict[str, Any], key: str) -> bool:
    """Whether the record itself has ``key`` (``model.weights``: a dotted path)."""
    value: Any = record
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


def load_with_provenance(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The record and what ``provenance.json`` adds to it; GeneratorError where both state the same key."""
    record, extra = load(path), provenance(path)
    both = [key for key in extra if key != "source" and stated(record, key)]
    if both:
        raise GeneratorError(f"{PROVENANCE.name}: {path.name} states {', '.join(both)} itself")
    if "draft_model.weights" in extra and "draft_model" not in record:
        raise GeneratorError(f"{PROVENANCE.name}: {path.name} has no draft_model")
    return record, extra


def load(path: Path) -> dict[str, Any]:
    """One record; GeneratorError for a name unusable as an anchor or for a file that is not a record."""
    if not NAME.match(path.stem):
        raise GeneratorError(f"{path.name}: record names use a-z, 0-9 and '-' (they become page anchors)")
    try:
        record = read_json(path)
    except json.JSONDecodeError as error:
        raise GeneratorError(f"{path.name}: not JSON ({error})") from None
    if not isinstance(record, dict) or "command" not in record:
        raise GeneratorError(f"{path.name}: not a run record (no 'command')")
    return record


def cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text: object) -> str:
    """An inline code span for ``text`` (which holds no backquote in records)."""
    return f"`{text}`"


def fence(text: str, lang: str = "text") -> str:
    """A fenced block long enough not to be closed by backquotes inside ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def command_lines(command: list[str]) -> str:
    """The command as a shell would take it, one option (with its values) per line."""
    groups: list[list[str]] = []
    for index, part in enumerate(command):
        starts_group = index == 0 or (part.startswith("--") and len(part) > 2)
        if starts_group:
            groups.append([])
        groups[-1].append(shlex.quote(part))
    return " \\\n  ".join(" ".join(group) for group in groups)


def entry_point(command: list[str]) -> str:
    """``mini_deepinfer.generate`` for ``python -m mini_deepinfer.generate ...``, else the program."""
    if len(command) > 2 and command[1] == "-m":
        return command[2]
    return command[0] if command else MISSING


def weights_label(model: dict[str, Any], from_provenance: str | None = None) -> str:
    """"random weights (...)" for a random checkpoint, what the record (or provenance.json) states, or
    "not stated"."""
    from mini_deepinfer.tools.checkpoints import CHECKPOINT_PRESETS as PRESET_NAMES

    stated = model.get("weights")
    if isinstance(stated, str):
        return stated
    if from_provenance is not None:
        return f"{from_provenance} — {FROM_PROVENANCE}"
    path = PurePosixPath(str(model.get("path") or ""))
    if path.parent == PurePosixPath("weights") and path.name in PRESET_NAMES:
        return f"random weights (`python -m mini_deepinfer.random_checkpoint --preset {path.name}`)"
    return "not stated in the record"


def model_line(model: dict[str, Any] | None, from_provenance: str | None = None) -> str:
    if not model:
        return MISSING
    count = model.get("parameter_count")
    path = model.get("path")
    parts = [
        code(path) if path else "no checkpoint (built in code)",
        str(model.get("architecture") or MISSING),
        f"{count:,} parameters" if isinstance(count, int) else MISSING,
        str(model.get("dtype") or MISSING),
        weights_label(model, from_provenance),
    ]
    return " · ".join(parts)


def device_line(device: dict[str, Any]) -> str:
    if not device:
        return MISSING
    where = str(device.get("type") or MISSING)
    if device.get("index") is not None:
        where += f":{device['index']}"
    parts = [where, str(device.get("name") or MISSING)]
    threads = device.get("cpu_threads")
    if threads:
        parts.append(f"{threads} CPU thread{'' if threads == 1 else 's'}")
    for key in ("torch", "cuda", "driver", "torch_npu", "cann"):
        if device.get(key):
            parts.append(f"{key} {device[key]}")
    return " · ".join(parts)


def sha_line(source: dict[str, Any]) -> str:
    sha = source.get("sha") if source else None
    if not sha:
        return "not recorded (not run from a git checkout)"
    dirty = source.get("dirty")
    states = {True: "dirty: the package differed from this commit", False: "clean"}
    state = states.get(dirty, "dirty: unknown")
    return f"{code(sha[:12])} ({state})"


def cache_line(cache: dict[str, Any]) -> str:
    if not cache:
        return MISSING
    parts = []
    for name, slots in cache.items():
        kv, state = slots.get("kv", {}), slots.get("state", {})
        parts.append(f"{name}: KV {kv.get('free')}/{kv.get('capacity')} free, "
                     f"state {state.get('free')}/{state.get('capacity')} free")
    return " · ".join(parts)


def verdict(result: Any) -> str:
    """"passed", "**FAILED**", or "" when the check states no ``passed`` flag."""
    passed = result.get("passed") if isinstance(result, dict) else None
    return {True: "passed", False: "**FAILED**"}.get(passed, "") if isinstance(passed, bool) else ""


def check_line(result: Any) -> str:
    if not isinstance(result, dict):
        return code(json.dumps(result, ensure_ascii=False))
    rest = {key: value for key, value in result.items() if key != "passed"}
    details = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in rest.items())
    return " · ".join(part for part in (verdict(result), cell(details)) if part) or MISSING


def seconds(value: Any) -> str:
    return f"{value:.3f} s" if isinstance(value, (int, float)) else MISSING


def timings_line(timings: dict[str, Any]) -> str:
    if not timings:
        return MISSING
    return f"load_s {seconds(timings.get('load_s'))} · run_s {seconds(timings.get('run_s'))}"


def execution_line(record: dict[str, Any], extra: dict[str, str]) -> str | None:
    """How the rounds ran: the record's ``execution``, else provenance.json's, else None (not known)."""
    execution = record.get("execution")
    if isinstance(execution, dict):
        return cell(", ".join(f"{key}={json.dumps(value)}" for key, value in execution.items())) or MISSING
    if "execution" in extra:
        return f"{cell(extra['execution'])} — {FROM_PROVENANCE}"
    return None


def summary_list(record: dict[str, Any], extra: dict[str, str] | None = None) -> list[str]:
    extra = extra or {}
    rows = [("model", model_line(record.get("model"), extra.get("model.weights")))]
    if "draft_model" in record:
        rows.append(("draft_model", model_line(record.get("draft_model"), extra.get("draft_model.weights"))))
    rows += [
        ("device", device_line(record.get("device") or {})),
        ("source_sha", sha_line(record.get("source_sha") or {})),
        ("version", str(record.get("version") or MISSING)),
        ("started_at", str(record.get("started_at") or MISSING)),
        ("cache", cache_line(record.get("cache") or {})),
    ]
    checks = record.get("checks") or {}
    check_rows = [(f"checks.{name}", check_line(result)) for name, result in checks.items()]
    rows += check_rows or [("checks", "none")]
    rows.append(("timings", timings_line(record.get("timings") or {})))
    execution = execution_line(record, extra)
    if execution is not None:
        rows.append(("execution", execution))
    lines = [f"- `{key}`: {value}" for key, value in rows]
    if "source" in extra:
        lines.append(f"- `{PROVENANCE.relative_to(SNIPPETS.parent).as_posix()}`: {cell(extra['source'])}")
    return lines


def request_block(index: int, request: dict[str, Any], first_token_s: Any) -> list[str]:
    outputs = request.get("output_token_ids") or []
    head = (
        f"**`requests[{index}]`** · `finish_reason` {code(request.get('finish_reason'))} · "
        f"{len(outputs)} output tokens · first token after {seconds(first_token_s)}"
    )
    if "seed" in request:
        head += f" · `seed` {request['seed']}"
    lines = [head, ""]
    if request.get("prompt") is None:  # token ids only, as in the demos without a tokenizer
        lines += ["`prompt_token_ids`", "", fence(json.dumps(request.get("prompt_token_ids") or []))]
    else:
        lines += ["`prompt`", "", fence(str(request["prompt"]))]
    lines += ["", "`output_token_ids`", "", fence(json.dumps(outputs))]
    if request.get("text") is not None:
        lines += ["", "`text` (as a JSON string, so that newlines and spaces show)", ""]
        lines += [fence(json.dumps(request["text"], ensure_ascii=False))]
    if "committed_groups" in request:
        lines += ["", "`committed_groups`", "", fence(json.dumps(request["committed_groups"]))]
    return lines


def config_block(config: dict[str, Any]) -> list[str]:
    lines = ['??? info "`config`: every resolved option"', "", "    | option | value |", "    |---|---|"]
    for key, value in config.items():
        lines.append(f"    | `{key}` | {cell(code(json.dumps(value, ensure_ascii=False)))} |")
    return lines


def render_record(path: Path) -> str:
    """The Markdown block of one record."""
    record, extra = load_with_provenance(path)
    command = [str(part) for part in record.get("command") or []]
    lines = [f"### {path.stem} {{#{path.stem}}}", "", fence(command_lines(command), "bash"), ""]
    lines += summary_list(record, extra)
    first_token = (record.get("timings") or {}).get("first_token_s") or []
    for index, request in enumerate(record.get("requests") or []):
        first = first_token[index] if index < len(first_token) else None
        lines += ["", *request_block(index, request, first)]
    lines += ["", *config_block(record.get("config") or {})]
    json_path = path.relative_to(SNIPPETS.parent).as_posix()
    lines += ["", f'??? note "JSON: `{json_path}`"', ""]
    lines += ["    ```json", f'    --8<-- "{json_path}"', "    ```"]
    return "\n".join(lines) + "\n"


def index_row(path: Path) -> str:
    record, extra = load_with_provenance(path)
    model = record.get("model") or {}
    weights = weights_label(model, extra.get("model.weights"))
    model_cell = " · ".join([
        str(model.get("architecture") or MISSING), str(model.get("dtype") or MISSING),
        ("random weights" if weights.startswith("random weights") else weights)
        + (" (provenance.json)" if "model.weights" in extra else ""),
    ])
    requests = record.get("requests") or []
    reasons = ", ".join(sorted({str(request.get("finish_reason")) for request in requests})) or MISSING
    checks = record.get("checks") or {}
    verdicts = ", ".join(f"{name} {verdict(result) or 'see record'}" for name, result in checks.items())
    entry = entry_point(record.get("command") or []).removeprefix("mini_deepinfer.")
    device = record.get("device") or {}
    return (
        f"| [{path.stem}](#{path.stem}) | {code(entry)} | {cell(device.get('type') or MISSING)} "
        f"| {cell(model_cell)} | {len(requests)} ({cell(reasons)}) | {cell(verdicts or 'none')} |"
    )


def render_index() -> str:
    """A table with one row per record, linking to its block."""
    head = [
        "| record | entry point | device | model | requests (finish reasons) | checks |",
        "|---|---|---|---|---|---|",
    ]
    rows = [index_row(path) for path in record_files()] or ["| none yet | | | | | |"]
    return "\n".join(head + rows) + "\n"


def render_all() -> str:
    """Includes of every record block, in file-name order (pymdownx.snippets resolves nested includes)."""
    includes = [f'--8<-- "snippets/{RENDERED}/{path.stem}.md"' for path in record_files()]
    return "\n\n".join(includes) + "\n" if includes else "No record yet.\n"


OUTPUTS: dict[str, Callable[[], str]] = {
    f"{RENDERED}/index.md": render_index,
    f"{RENDERED}/all.md": render_all,
    **{f"{RENDERED}/{path.stem}.md": partial(render_record, path) for path in record_files()},
}
