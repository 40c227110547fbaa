"""Regenerate snippets/, the generated text that the site's pages embed (and docs/assets/pictures/).

Scope: finding the generator modules, running those whose inputs changed and writing their outputs under
``snippets/``, and checking that the files there are current (``--check``, which a test runs). Non-scope: what
any snippet says (each generator owns its outputs); what counts as a generator's input (``stamps.py``);
deleting files: a snippet that no generator writes any more is removed by hand.

The convention for generators:

* A generator is a module ``site_scripts/<family>/gen_<name>.py``, in the folder of the pages it feeds;
  ``--only <name>`` picks it by its short name.
* It exposes ``OUTPUTS: dict[str, Callable[[], str]]``, mapping a path relative to ``snippets/``
  (for example ``"toy/demo.txt"``) to a function that returns the file's full text.
* A generator whose files the pages show as images (SVG pictures) sets
  ``OUTPUT_DIR = "docs/assets/pictures"``; its paths are then relative to that folder, which MkDocs serves as
  it is (``OUTPUT_DIRS`` lists the folders allowed).
* Most snippets are the terminal output of a demo command; :func:`~site_scripts.build.common.run_module`
  runs one the way the doc tests do (same environment), so a page's command and its included output agree.
* Each path belongs to exactly one generator.
* The sentences it fills in are data: its family's ``words.toml``, read with
  :func:`~site_scripts.build.common.phrases`, each phrase in English and Chinese side by side.
* A generator whose digits depend on the machine's arithmetic (half-precision sums on a CPU) sets
  ``MACHINE_DEPENDENT`` to a :class:`~site_scripts.build.common.MachineDependent`: ``--check`` compares those
  outputs exactly on a machine like the one that wrote them, and checks the pages' claims on any other.

Usage::

    python -m site_scripts.build.regenerate             # run the generators whose inputs or outputs
                                                        # changed since their last run here (stamps.py);
                                                        # write what changed (machine-dependent outputs
                                                        # written on another machine are left as they are)
    python -m site_scripts.build.regenerate --all       # the same, but every generator runs
    python -m site_scripts.build.regenerate --check     # every generator runs; write nothing, exit 1
                                                        # listing stale or missing files
    python -m site_scripts.build.regenerate --only toy  # only site_scripts/lessons/gen_toy.py
                                                        # (``--only toy,abc``: two)

So a second ``make serve`` reaches the site in seconds. A first line on stderr says how many generators run
and why; each prints one line as it finishes (``[3/21] gen_toy: 4 files, 1.2 s``), and one every ten seconds
while it runs. Two options serve the tests, which render every snippet once per test session and hold several
invariants on that one rendering: ``--save FILE`` also writes the rendered texts (JSON, path -> text; every
generator runs), and ``--from FILE`` takes them from such a file instead of running the generators.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from site_scripts.build import stamps
from site_scripts.build.common import ROOT, GeneratorError, MachineDependent

OUTPUT_DIRS = ("snippets", "docs/assets/pictures")  # where generators may write, relative to ROOT
PACKAGE = "site_scripts"
DIFF_LINES = 30
HEARTBEAT_S = 10.0  # while a generator runs, a line on stderr this often

Generator = Callable[[], str]
After = Callable[[str, dict[str, str], set[str]], None]  # a generator's name, its texts, the files it read


def generator_modules() -> dict[str, str]:
    """Short name (``gen_toy``) -> dotted module (``site_scripts.lessons.gen_toy``) of every generator.

    Generators live one folder down, in the family of pages they feed (``site_scripts/lessons/gen_toy.py``);
    a short name is unique across the families.
    """
    found: dict[str, str] = {}
    for path in sorted((ROOT / PACKAGE).glob("*/gen_*.py")):
        if path.stem in found:
            raise GeneratorError(f"two generators named {path.stem}: {found[path.stem]}, {path.parent.name}")
        found[path.stem] = f"{PACKAGE}.{path.parent.name}.{path.stem}"
    return found


def generator_names(only: str | None = None) -> list[str]:
    """Short names (``gen_*``) of the generators, sorted; ``only`` picks some by name (``toy`` or
    ``gen_toy``), several separated by commas (``toy,abc``)."""
    names = sorted(generator_modules())
    if only is None:
        return names
    wanted = [name if name.startswith("gen_") else f"gen_{name}" for name in only.split(",")]
    unknown = [name for name in wanted if name not in names]
    if unknown:
        raise GeneratorError(f"no generator {unknown[0]!r}; known: {', '.join(names) or 'none'}")
    return sorted(set(wanted))


def _check_relative(path: str, module: str) -> None:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\\" in path:
        raise GeneratorError(f"{module}: output path {path!r} must be relative to its folder, without '..'")


def collect_outputs(names: Sequence[str]) -> dict[str, tuple[str, Generator]]:
    """Map each output path (relative to the repository root) to (module name, function).

    Checks the OUTPUTS convention and the generator's ``OUTPUT_DIR`` (default ``snippets``).
    """
    found: dict[str, tuple[str, Generator]] = {}
    modules = generator_modules()
    for name in names:
        module = importlib.import_module(modules[name])
        outputs = getattr(module, "OUTPUTS", None)
        if not isinstance(outputs, Mapping):
            raise GeneratorError(f"{name}: OUTPUTS must be a dict of path -> function")
        folder = getattr(module, "OUTPUT_DIR", "snippets")
        if folder not in OUTPUT_DIRS:
            raise GeneratorError(f"{name}: OUTPUT_DIR {folder!r} is not one of {', '.join(OUTPUT_DIRS)}")
        for relative, function in outputs.items():
            _check_relative(relative, name)
            path = f"{folder}/{relative}"
            if path in found:
                raise GeneratorError(f"{path}: written by both {found[path][0]} and {name}")
            found[path] = (name, function)
    return found


def machine_dependent(names: Sequence[str]) -> list[MachineDependent]:
    """Each generator's ``MACHINE_DEPENDENT`` (if it sets one), with paths relative to the repository root."""
    groups = []
    modules = generator_modules()
    for name in names:
        module = importlib.import_module(modules[name])
        group = getattr(module, "MACHINE_DEPENDENT", None)
        if group is None:
            continue
        if not isinstance(group, MachineDependent):
            raise GeneratorError(f"{name}: MACHINE_DEPENDENT must be a MachineDependent")
        unknown = [p for p in (group.record, *group.outputs) if p not in module.OUTPUTS]
        if unknown:
            raise GeneratorError(f"{name}: MACHINE_DEPENDENT names outputs it does not write: {unknown}")
        folder = getattr(module, "OUTPUT_DIR", "snippets")
        groups.append(MachineDependent(
            f"{folder}/{group.record}", tuple(f"{folder}/{p}" for p in group.outputs), group.claims
        ))
    return groups


def written_elsewhere(texts: Mapping[str, str], groups: Sequence[MachineDependent]) -> list[MachineDependent]:
    """The groups whose committed record names other kernels than this machine's (nothing committed: none)."""
    found = []
    for group in groups:
        target = ROOT / group.record
        if target.exists() and target.read_text(encoding="utf-8").strip() != texts[group.record].strip():
            found.append(group)
    return found


def set_aside_other_machine(
    texts: Mapping[str, str], groups: Sequence[MachineDependent]
) -> tuple[dict[str, str], list[str], list[str]]:
    """Check each group's claims; set aside from exact comparison the groups written on another machine.

    Returns the texts to compare exactly, one note per group set aside, and the claims that fail here.
    """
    compared, notes = dict(texts), []
    broken = [f"{group.record}: {claim}" for group in groups for claim in group.claims()]
    for group in written_elsewhere(texts, groups):
        committed = (ROOT / group.record).read_text(encoding="utf-8").strip()
        here = texts[group.record].strip()
        for path in (group.record, *group.outputs):
            compared.pop(path)
        notes.append(f"{group.record}: written on `{committed}`, this machine is `{here}`; "
                     f"the digits of {', '.join(group.outputs)} were not compared, only the pages' claims")
    return compared, notes, broken


def kept_from_other_machine(
    texts: Mapping[str, str], groups: Sequence[MachineDependent]
) -> tuple[dict[str, str], list[str]]:
    """Writing: leave the committed copies of a group written on another machine as they are.

    Only the machine differs there, not the code, so overwriting them would change tracked files on every
    machine unlike the one that wrote them. Returns the texts to write and one note per group kept.
    """
    kept, notes = dict(texts), []
    for group in written_elsewhere(texts, groups):
        for path in (group.record, *group.outputs):
            kept.pop(path)
        here = texts[group.record].strip()
        notes.append(f"kept {', '.join((group.record, *group.outputs))} as committed, as expected: their "
                     f"last digits depend on the CPU that computed them, and this machine (`{here}`) is not "
                     "the one that wrote them, so it does not rewrite them (`--check` checks the pages' "
                     "claims here instead)")
    return kept, notes


@contextmanager
def heartbeat(name: str) -> Iterator[None]:
    """While the body runs, a line on stderr every :data:`HEARTBEAT_S` seconds: a long run is not silent."""
    done, started = threading.Event(), time.perf_counter()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            print(f"  {name} still running, {time.perf_counter() - started:.0f} s", file=sys.stderr)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def render(outputs: Mapping[str, tuple[str, Generator]], after: After | None = None) -> dict[str, str]:
    """Call every generator function; returns path -> text.

    One line on stderr as each generator finishes: its place, its file count and how long it took. ``after``,
    if given, is called as each generator finishes, with the files it read (``stamps.reading``).
    """
    texts: dict[str, str] = {}
    names = list(dict.fromkeys(name for name, _ in outputs.values()))
    for place, name in enumerate(names, start=1):
        started = time.perf_counter()
        paths = [path for path, (owner, _) in outputs.items() if owner == name]
        with stamps.reading(ROOT) as read, heartbeat(name):
            made = {path: outputs[path][1]() for path in paths}
        wrong = next((path for path, text in made.items() if not isinstance(text, str)), None)
        if wrong:
            raise GeneratorError(f"{name}: {wrong} returned {type(made[wrong]).__name__}, not str")
        seconds = time.perf_counter() - started
        files = f"{len(paths)} file" + ("" if len(paths) == 1 else "s")
        print(f"[{place}/{len(names)}] {name}: {files}, {seconds:.1f} s", file=sys.stderr)
        texts.update(made)
        if after is not None:
            after(name, made, read)
    return texts


def saved(path: str, outputs: Mapping[str, tuple[str, Generator]]) -> dict[str, str]:
    """The texts ``--save`` wrote to ``path``, for the outputs named; a missing output is an error."""
    try:
        texts = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise GeneratorError(f"{path}: cannot read saved texts ({error})") from None
    missing = sorted(set(outputs) - set(texts))
    if missing:
        raise GeneratorError(f"{path}: no saved text for {', '.join(missing[:5])}")
    return {name: texts[name] for name in outputs}


def stale(texts: Mapping[str, str]) -> dict[str, str]:
    """Path -> short unified diff for every output whose file is missing or differs."""
    found: dict[str, str] = {}
    for path, text in texts.items():
        target = ROOT / path
        old = target.read_text(encoding="utf-8") if target.exists() else None
        if old == text:
            continue
        diff = difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"{path} ({'committed' if old is not None else 'missing'})",
            tofile=f"{path} (regenerated)",
        )
        lines = list(diff)
        more = [f"... {len(lines) - DIFF_LINES} more diff lines\n"] if len(lines) > DIFF_LINES else []
        found[path] = "".join(lines[:DIFF_LINES] + more)
    return found


def write(texts: Mapping[str, str], changed: Sequence[str]) -> None:
    """Write the changed outputs, creating folders."""
    for path in changed:
        target = ROOT / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(texts[path], encoding="utf-8", newline="\n")


def write_current(texts: Mapping[str, str], groups: Sequence[MachineDependent]) -> int:
    """Write the texts that differ from their files, but those :func:`kept_from_other_machine`; print a line
    for each file written or kept. Returns how many were written."""
    kept, notes = kept_from_other_machine(texts, groups)
    diffs = stale(kept)
    write(kept, list(diffs))
    for line in [f"wrote {path}" for path in diffs] + notes:
        print(line, flush=True)
    return len(diffs)


def write_changed(outputs: Mapping[str, tuple[str, Generator]], every: bool) -> tuple[dict[str, str], int]:
    """Write mode: run the generators ``stamps.plan`` picks; as each finishes, write its outputs and stamp (an
    interrupted run keeps what it finished). Returns the texts rendered and how many files were written."""
    modules, prints, written = generator_modules(), stamps.fingerprints(ROOT), 0
    generators = {name: (modules[name], [path for path in outputs if outputs[path][0] == name])
                  for name in dict.fromkeys(owner for owner, _ in outputs.values())}
    reasons = stamps.plan(prints, generators, every)

    def after(name: str, texts: dict[str, str], read: set[str]) -> None:
        nonlocal written
        written += write_current(texts, machine_dependent([name]))
        if prints is not None:
            stamps.record(prints, name, modules[name], texts, read)

    return render({path: o for path, o in outputs.items() if o[0] in reasons}, after), written


def summary(snippets: int, ran: int, written: int, skipped: int) -> str:
    """The last line of a write: what was compared with its file, what was written, what did not run."""
    def count(n: int, noun: str) -> str:
        return f"{n} {noun}" + ("" if n == 1 else "s")

    skip = f"{count(skipped, 'generator')} up to date, not run (inputs unchanged)"
    done = f"{written} rewritten (listed above)" if written else "none needed rewriting (all current)"
    line = f"{count(snippets, 'snippet')} from {count(ran, 'generator')} checked; {done}"
    return skip if not ran else f"{line}; {skip}" if skipped else line


def check(texts: Mapping[str, str], groups: Sequence[MachineDependent], generators: int) -> int:
    """``--check``: print what is stale (and what was not compared, and why); returns the exit code."""
    compared, notes, broken = set_aside_other_machine(texts, groups)
    diffs = stale(compared)
    for diff in diffs.values():
        sys.stdout.write(diff)
    for line in notes + [f"claim fails: {claim}" for claim in broken]:
        print(line)
    if diffs:
        print(f"{len(diffs)} of {len(texts)} snippets are stale; "
              "run `python -m site_scripts.build.regenerate`")
    if diffs or broken:
        return 1
    print(f"{len(texts)} snippets from {generators} generators are current")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m site_scripts.build.regenerate",
        description="Regenerate snippets/ from the site_scripts/*/gen_*.py generators.",
    )
    parser.add_argument("--check", action="store_true",
                        help="run every generator and write nothing; exit 1 if a file is stale")
    parser.add_argument("--all", action="store_true",
                        help="run every generator, even one whose inputs did not change since it last ran")
    parser.add_argument("--only", metavar="NAME",
                        help="run only this generator (gen_NAME.py); several: NAME,NAME")
    parser.add_argument("--save", metavar="FILE", help="also write the rendered texts to FILE (JSON)")
    parser.add_argument("--from", dest="source", metavar="FILE",
                        help="take the texts from a file --save wrote instead of running the generators")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        names = generator_names(args.only)
    except GeneratorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        outputs = collect_outputs(names)
        groups, written = machine_dependent(names), 0
        if args.source:
            texts = saved(args.source, outputs)
        elif args.check:
            print(f"checking snippets: all {len(names)} generators run", file=sys.stderr)
            texts = render(outputs)
        else:
            texts, written = write_changed(outputs, every=args.all or bool(args.save))
    except GeneratorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.save:
        Path(args.save).write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    if args.check:
        return check(texts, groups, len(names))
    if args.source:
        written = write_current(texts, groups)
    ran = len({outputs[path][0] for path in texts})
    print(summary(len(texts), ran, written, len(names) - ran))
    return 0


if __name__ == "__main__":
    sys.exit(main())
