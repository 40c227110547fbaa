"""Run records: the JSON file ``--output FILE`` writes, so a run can be checked and shown later.

Scope: the record's shape (:class:`RunRecord`, :data:`RECORD_KEYS`), its provenance (source SHA, package
version, start time), checking the output path before a run starts, and writing the file atomically (or
into it, when the path is a FIFO or a device).

Non-scope: measuring anything (the runner, the engine and the commands fill the record), describing the
device (``runtime.device.device_info``), rendering records on the site (``site_scripts/``). This module
imports only the standard library.

A record is a plain dict with these top-level keys, in this order::

    schema, version, command, started_at, source_sha, device, model, [draft_model,] config,
    requests, cache, checks, timings, [speculative,] [execution]

``draft_model`` appears only in two-model (speculative) runs, like ``committed_groups`` in a request and
``speculative`` (the runner's verify rounds, drafts proposed and drafts accepted, and the two figures derived
from them: :func:`speculative_info`).
``cached_prompt_tokens`` in a request (how many of its prompt tokens came from the prefix cache, as vLLM's
``num_cached_tokens``) and ``prefix_cached`` in ``cache.target.kv`` (KV slots the prefix cache still holds
at the end) appear only in runs with the prefix cache.
``execution`` says how the rounds ran: ``graphs`` (decode rounds on static buffers), ``captured`` (replayed as
device graphs), ``compiled`` (their step through ``torch.compile``) and ``rounds`` (how many ran each way).
"""

from __future__ import annotations

import copy
import enum
import json
import os
import re
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from mini_deepinfer.tools.cli import argument_text
from mini_deepinfer.tools.files import default_file_mode, disk_errors

__all__ = [
    "RECORD_KEYS",
    "SCHEMA_VERSION",
    "RecordError",
    "RunRecord",
    "cache_info",
    "check_output_path",
    "model_info",
    "package_source_sha",
    "package_version",
    "source_sha",
    "speculative_info",
    "utc_now_iso",
    "write_record",
]

SCHEMA_VERSION = 1
"""Bumped whenever a key is renamed, removed or changes meaning (adding a key does not bump it)."""

RECORD_KEYS: tuple[str, ...] = (
    "schema", "version", "command", "started_at", "source_sha", "device", "model", "config",
    "requests", "cache", "checks", "timings",
)
"""Top-level keys every record has (``draft_model`` is added in two-model runs, ``speculative`` in generate's
two-model runs, ``execution`` by generate)."""

DISTRIBUTION_NAME = "mini-deepinfer"
PACKAGE_DIR = Path(__file__).resolve().parent.parent


class RecordError(ValueError):
    """The run record cannot be written; the message is one line."""


def utc_now_iso() -> str:
    """The current UTC time, e.g. ``2025-05-01T08:30:00+00:00`` (readable by ``datetime.fromisoformat``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _git(repo_dir: Path, *args: str) -> str | None:
    """Run ``git -C repo_dir args``; stdout, or None if git is missing, fails or this is no checkout."""
    try:
        result = subprocess.run(
            ["git", "-C", str(repo_dir), *args], capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def source_sha(repo_dir: str | os.PathLike[str], paths: Sequence[str] = ()) -> dict[str, Any]:
    """The commit the code runs from, and whether tracked files differ from it.

    Args:
        repo_dir: any folder inside the checkout.
        paths: limit the dirty check to these pathspecs (relative to ``repo_dir``); empty means the
            whole checkout. Untracked files never count (as in ``git describe --dirty``).

    Returns:
        ``{"sha": str | None, "dirty": bool | None}``: both None outside a git checkout or without git;
        ``sha`` None in a checkout with no commit yet.
    """
    folder = Path(repo_dir)
    status = _git(folder, "status", "--porcelain", "--untracked-files=no", "--", *paths)
    if status is None:
        return {"sha": None, "dirty": None}
    head = _git(folder, "rev-parse", "--verify", "--quiet", "HEAD")
    return {"sha": head.strip() if head else None, "dirty": bool(status.strip())}


def package_source_sha() -> dict[str, Any]:
    """The commit this package runs from, dirty when a tracked file of the package differs from it."""
    return source_sha(PACKAGE_DIR, paths=(".",))


def _pyproject_version(pyproject: Path) -> str | None:
    """``[project] version`` from a pyproject.toml, or None if absent or unreadable."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: read the one key by pattern
        section = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
        found = section and re.search(r"^version\s*=\s*[\"']([^\"']+)[\"']", section.group(1), re.MULTILINE)
        return found.group(1) if found else None
    try:
        version = tomllib.loads(text).get("project", {}).get("version")
    except tomllib.TOMLDecodeError:
        return None
    return version if isinstance(version, str) else None


def package_version() -> str | None:
    """The version of ``mini-deepinfer``: from ``pyproject.toml`` in a checkout, else installed metadata.

    A checkout's pyproject comes first because stale install metadata (an old ``*.egg-info``) would
    otherwise hide a version bump; an installed wheel has no pyproject beside the package.
    """
    in_checkout = _pyproject_version(PACKAGE_DIR.parent / "pyproject.toml")
    if in_checkout is not None:
        return in_checkout
    try:
        return metadata.version(DISTRIBUTION_NAME)
    except metadata.PackageNotFoundError:
        return None


def _is_special(path: Path) -> bool:
    """True for an existing path that is neither a regular file nor a folder: a FIFO, a pipe behind
    ``/dev/fd/N``, a character device. A record is written into such a thing, never renamed over it."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _check_name_length(target: Path, folder: Path) -> None:
    """The file name must fit the file system's limit (``NAME_MAX``, usually 255 bytes)."""
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    size = len(os.fsencode(target.name))
    if size > limit:
        raise RecordError(f"cannot write run record: file name is {size} bytes, the file system allows "
                          f"{limit}")


def _check_can_create(folder: Path) -> None:
    """Create and remove a temporary file in ``folder``: the surest test that the write will work later."""
    try:
        fd, name = tempfile.mkstemp(prefix=".record-", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise RecordError(f"cannot write run record in folder '{folder}': {exc.strerror}") from None
    os.close(fd)
    os.unlink(name)


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """Check, before a run starts, that a record can be written to ``path``.

    A regular file (new or existing) is written atomically later, so its folder must let a file be created
    there and its name must fit the file system. An existing FIFO or character device is written into as it
    is, so it must be writable.

    Raises:
        RecordError: the path is a folder, or its folder is missing, not a folder or not writable, or the
            name is too long, or a FIFO or device that cannot be written.
    """
    target = Path(path)
    if target.parent.is_dir():
        _check_name_length(target, target.parent)  # before any look at the file: stat fails on such a name
    if _is_special(target):
        if not os.access(target, os.W_OK):
            raise RecordError(f"cannot write run record: '{target}' is not writable")
        return target
    if target.is_dir():
        raise RecordError(f"cannot write run record: '{target}' is a folder")
    if not target.parent.exists():
        raise RecordError(f"cannot write run record: folder '{target.parent}' does not exist")
    if not target.parent.is_dir():
        raise RecordError(f"cannot write run record: '{target.parent}' is not a folder")
    folder = Path(os.path.realpath(target)).parent  # where the file really goes (a link is followed)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RecordError(f"cannot write run record: folder '{target.parent}' is not writable")
    _check_can_create(folder)
    return target


def _json_default(value: Any) -> Any:
    """Encode the few non-JSON values records meet: paths and enums."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _encode(record: dict[str, Any]) -> str:
    """The record as indented UTF-8 JSON text; RecordError for values JSON cannot hold (incl. NaN)."""
    try:
        return json.dumps(record, ensure_ascii=False, indent=2, allow_nan=False, default=_json_default) + "\n"
    except (TypeError, ValueError) as exc:
        raise RecordError(f"cannot write run record: {exc}") from None


def write_record(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Write ``record`` as JSON, atomically: the file is either the old one or the complete new one.

    The text is encoded first, written to a temporary file in the same folder, flushed to disk and
    renamed over ``path`` (over the file a symbolic link points to, so the link stays); on any error the
    temporary file is removed. A FIFO or character device at ``path`` is written into instead: renaming
    over it would replace it with a regular file.

    Raises:
        RecordError: the record holds a value JSON cannot encode, or the path is unusable.
        NoSpaceError: the file system is full (the old file stays as it was).
        OSError: the disk write itself failed otherwise.
    """
    target = check_output_path(path)
    text = _encode(record)
    with disk_errors(path):
        _write_text(target, text)


def _write_text(target: Path, text: str) -> None:
    """Write ``text`` into a FIFO or device as it is, or atomically over a regular file (a temporary file
    renamed into place, removed on any error)."""
    if _is_special(target):
        with open(target, "w", encoding="utf-8") as file:
            file.write(text)
        return
    target = Path(os.path.realpath(target))
    fd, temp_name = tempfile.mkstemp(prefix=".record-", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temp_name, default_file_mode())  # mkstemp makes it owner-only; use the usual mode
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def model_info(
    path: str | os.PathLike[str] | None, architecture: str, parameter_count: int, dtype: str
) -> dict[str, Any]:
    """The ``model`` entry: where the weights came from, what they are, how many, in which dtype."""
    return {
        "path": None if path is None else os.fspath(path),
        "architecture": architecture,
        "parameter_count": parameter_count,
        "dtype": dtype,
    }


def cache_info(kv_capacity: int, kv_free: int, state_capacity: int, state_free: int) -> dict[str, Any]:
    """One model's ``cache`` entry: slot capacity and free slots at the end of the run."""
    return {
        "kv": {"capacity": kv_capacity, "free": kv_free},
        "state": {"capacity": state_capacity, "free": state_free},
    }


def speculative_info(verify_rounds: int, drafts_proposed: int, drafts_accepted: int) -> dict[str, Any]:
    """The ``speculative`` entry: the runner's counts over the whole run, and two figures derived from them.

    A verify round is one speculative decode of one request (drafts proposed, then one target forward).
    ``accepted_per_round`` is ``drafts_accepted / verify_rounds``: the drafts the target accepted, not the
    bonus or corrected token each round adds. ``acceptance_rate`` is ``drafts_accepted / drafts_proposed``.
    Both are None in a run without a verify round, and kept unrounded (a reader rounds where it prints).
    """
    return {
        "verify_rounds": verify_rounds,
        "drafts_proposed": drafts_proposed,
        "drafts_accepted": drafts_accepted,
        "accepted_per_round": drafts_accepted / verify_rounds if verify_rounds else None,
        "acceptance_rate": drafts_accepted / drafts_proposed if drafts_proposed else None,
    }


def _default_timings() -> dict[str, Any]:
    return {"load_s": None, "run_s": None, "first_token_s": []}


@dataclass
class RunRecord:
    """Collects one run's record; :meth:`to_dict` gives the plain dict :func:`write_record` stores.

    Build it with :meth:`start` (which fills the provenance), then fill ``config``, ``device``, ``model``,
    add requests, caches and checks as the run goes, and set ``timings["load_s"]`` / ``["run_s"]``.
    """

    command: list[str]
    config: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    draft_model: dict[str, Any] | None = None
    speculative: dict[str, Any] | None = None
    execution: dict[str, Any] | None = None
    source_sha: dict[str, Any] = field(default_factory=lambda: {"sha": None, "dirty": None})
    version: str | None = None
    started_at: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    cache: dict[str, dict[str, Any]] = field(default_factory=dict)
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=_default_timings)
    schema: int = SCHEMA_VERSION

    @classmethod
    def start(cls, command: Sequence[str], config: dict[str, Any] | None = None) -> RunRecord:
        """A record stamped now, with the engine's commit (dirty: the package differs from it) + version."""
        return cls(
            command=[argument_text(arg) for arg in command],
            config=dict(config or {}),
            source_sha=package_source_sha(),
            version=package_version(),
            started_at=utc_now_iso(),
        )

    def add_request(
        self,
        *,
        prompt: str | None,
        prompt_token_ids: Sequence[int],
        output_token_ids: Sequence[int],
        text: str | None,
        finish_reason: str | enum.Enum | None,
        first_token_s: float | None = None,
        committed_groups: Sequence[Sequence[int]] | None = None,
        seed: int | None = None,
        cached_prompt_tokens: int | None = None,
    ) -> None:
        """Append one finished request (in submission order) and its time to first token.

        ``committed_groups`` (two-model runs), ``seed`` (the generator's ``initial_seed()`` of a sampled
        request, so an unseeded run can be replayed) and ``cached_prompt_tokens`` (prompt tokens reused from
        the prefix cache) are stored only when given.
        """
        entry: dict[str, Any] = {
            "prompt": prompt,
            "prompt_token_ids": list(prompt_token_ids),
            "output_token_ids": list(output_token_ids),
            "text": text,
            "finish_reason": finish_reason.value if isinstance(finish_reason, enum.Enum) else finish_reason,
        }
        if committed_groups is not None:
            entry["committed_groups"] = [list(group) for group in committed_groups]
        if seed is not None:
            entry["seed"] = seed
        if cached_prompt_tokens is not None:
            entry["cached_prompt_tokens"] = cached_prompt_tokens
        self.requests.append(entry)
        self.timings["first_token_s"].append(first_token_s)

    def set_cache(
        self, model: str, kv_capacity: int, kv_free: int, state_capacity: int, state_free: int
    ) -> None:
        """Record one model's slots at the end of the run (``model`` is e.g. ``"target"`` or ``"draft"``)."""
        self.cache[model] = cache_info(kv_capacity, kv_free, state_capacity, state_free)

    def add_check(self, name: str, result: dict[str, Any]) -> None:
        """Record what a check compared and its outcome (``add_check("check_greedy", {"passed": True})``)."""
        self.checks[name] = dict(result)

    def to_dict(self) -> dict[str, Any]:
        """A deep copy as a plain dict, keys in the documented order."""
        record: dict[str, Any] = {
            "schema": self.schema,
            "version": self.version,
            "command": self.command,
            "started_at": self.started_at,
            "source_sha": self.source_sha,
            "device": self.device,
            "model": self.model,
        }
        if self.draft_model is not None:
            record["draft_model"] = self.draft_model
        record.update(config=self.config, requests=self.requests, cache=self.cache, checks=self.checks,
                      timings=self.timings)
        if self.speculative is not None:
            record["speculative"] = self.speculative
        if self.execution is not None:
            record["execution"] = self.execution
        return copy.deepcopy(record)

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_dict` to ``path`` with :func:`write_record`."""
        write_record(path, self.to_dict())
