"""Writing files and folders so that a reader never sees half of one.

Scope: the mode a plain ``open`` would give a new file (:func:`default_file_mode`), and
:func:`staged_folder`, which builds a folder under a hidden name beside its destination and renames it into
place only when it is complete. The checkpoint writers use it; run records write single files the same way
(``records.write_record``).
Non-scope: what goes into the files.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["default_file_mode", "staged_folder"]


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
