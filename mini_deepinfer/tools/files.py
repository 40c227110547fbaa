"""Writing files and folders so that a reader never sees half of one.

Scope: the mode a plain ``open`` would give a new file (:func:`default_file_mode`), and
:func:`staged_folder`, which builds a folder under a hidden name beside its destination and renames it into
place only when it is complete. The checkpoint writers use it; run records write single files the same way
(``records.write_record``). A full disk is one line naming the file system and the file
(:class:`NoSpaceError`): :func:`check_free_space` before a write whose size is known, :func:`disk_errors`
around any write (also the errors safetensors raises, which carry only the OS error's number).
Non-scope: what goes into the files.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["NoSpaceError", "check_free_space", "default_file_mode", "disk_errors", "staged_folder"]

FULL_DISK = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded",
             errno.EFBIG: "file size limit (ulimit -f) reached"}
"""The OS errors that mean "this write does not fit", and how the message words each."""
_OS_ERROR_NUMBER = re.compile(r"\(os error (\d+)\)")  # how a Rust library (safetensors) reports one


class NoSpaceError(ValueError):
    """A write does not fit on its file system: one line naming the file system and the file."""


def _mount_point(path: Path) -> Path:
    """The mount point of the file system that holds ``path`` (or would hold it)."""
    here = Path(os.path.realpath(path))
    while not os.path.ismount(here):
        here = here.parent
    return here


def _error_number(exc: Exception) -> int | None:
    """The OS error number of an ``OSError``, or the one a library quoted as ``(os error N)``."""
    if isinstance(exc, OSError):
        return exc.errno
    match = _OS_ERROR_NUMBER.search(str(exc))
    return int(match.group(1)) if match else None


@contextmanager
def disk_errors(path: str | os.PathLike[str],
                library_errors: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Turn a full disk (or quota, or file size limit) met while writing ``path`` into :class:`NoSpaceError`.

    ``library_errors`` are the exception types of a library that writes files itself; they count when their
    message quotes one of those OS errors. Every other error passes unchanged.
    """
    try:
        yield
    except (OSError, *library_errors) as exc:
        number = _error_number(exc)
        if number not in FULL_DISK:
            raise
        raise NoSpaceError(f"{FULL_DISK[number]} on device {_mount_point(Path(path))} for {path}") from None


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def check_free_space(path: str | os.PathLike[str], needed: int) -> None:
    """Refuse, before writing, ``needed`` bytes that the file system holding ``path`` has no room for."""
    mount = _mount_point(Path(path))
    free = shutil.disk_usage(mount).free
    if free < needed:
        raise NoSpaceError(f"no space left on device {mount} for {path}: it needs {_size(needed)}, "
                           f"{_size(free)} are free")


def default_file_mode() -> int:
    """``0o666`` minus the process's umask: the mode ``open(path, "w")`` gives a new file.

    ``os`` can only read the umask by setting it, so it is set and put straight back.
    """
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _check_destination(output: Path, force: bool) -> None:
    """Refuse to overwrite a file, or a non-empty folder unless ``force``, or ever the folder the process runs
    in or one that holds it (``--force .`` would delete the work around it)."""
    if output.exists() and not output.is_dir():
        raise FileExistsError(f"output path exists and is not a folder: {output}")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise FileExistsError(f"output folder is not empty: {output} (pass --force to replace it)")
    here, target = Path(os.path.realpath(Path.cwd())), Path(os.path.realpath(output))
    if output.is_dir() and (target == here or target in here.parents):
        raise FileExistsError(f"output folder {output} is or holds the current folder; it is never replaced")


def _move_into_place(staging: Path, output: Path) -> None:
    """Rename the finished staging folder to ``output``, replacing what is there."""
    if output.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{output.name}.old-", dir=output.parent))
        os.replace(output, old / output.name)
        os.replace(staging, output)
        shutil.rmtree(old)
    else:
        os.replace(staging, output)


# --8<-- [start:staged_folder]
@contextmanager
def staged_folder(output: str | os.PathLike[str], force: bool = False) -> Iterator[Path]:
    """Yield an empty hidden folder beside ``output``; when the block ends normally, it becomes ``output``.

    On any error or interruption the hidden folder is removed and ``output`` is left as it was. The files get
    the usual mode (some writers, safetensors among them, create them owner-only).

    Raises:
        FileExistsError: ``output`` is a file, or a non-empty folder and ``force`` is false.
    """
    output = Path(output).absolute()
    _check_destination(output, force)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = output.parent / f".{output.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        yield staging
        mode = default_file_mode()
        for file in staging.iterdir():
            file.chmod(mode)
        _move_into_place(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
# --8<-- [end:staged_folder]
