"""Batch inputs: request files, directories of them and JSON Lines files, read lazily.

Each request becomes a `Source`: a name (the file stem without a trailing `.request`, or
`<stem>-<line>` for a JSON Lines file), where it came from (file and line, for messages) and
either its parsed JSON document or a one-line error. Sources are produced one at a time so
that memory stays flat however many requests there are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Suffixes that mark a JSON Lines file (one request per line).
JSONL_SUFFIXES = (".jsonl", ".ndjson")
#: Files in a directory that are never read as requests (plans written by an earlier batch).
PLAN_SUFFIX = ".plan.json"


class InputError(ValueError):
    """An INPUT argument that cannot be used at all (missing path, nothing to read)."""


@dataclass(frozen=True)
class Source:
    """One request to solve, before validation.

    - `name`: the output stem (unique within a batch).
    - `origin`: `file` or `file:line`, used in every message about it.
    - `document`: the parsed JSON document, or None when `error` says why it could not be read.
    """

    name: str
    origin: str
    document: object = None
    error: str | None = None


def request_stem(path: Path) -> str:
    """The output name of a request file: `a/foo.request.json` -> `foo`, `bar.json` -> `bar`."""
    stem = path.name
    for suffix in (".json", *JSONL_SUFFIXES):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return stem.removesuffix(".request") or path.name


def _is_jsonl(path: Path) -> bool:
    return path.name.endswith(JSONL_SUFFIXES)


def expand(inputs: Sequence[Path]) -> list[Path]:
    """The files behind the INPUT arguments, in order (directories give their sorted *.json).

    Raises InputError for a path that does not exist or when no file is found at all.
    """
    files: list[Path] = []
    for path in inputs:
        if path.is_dir():
            files.extend(
                p for p in sorted(path.iterdir())
                if p.is_file() and (p.suffix == ".json" or _is_jsonl(p))
                and not p.name.endswith(PLAN_SUFFIX)
            )
        elif path.exists():
            files.append(path)
        else:
            raise InputError(f"no such file or directory: {path}")
    if not files:
        raise InputError("no request files found in " + ", ".join(str(p) for p in inputs))
    return files


def count(files: Sequence[Path]) -> int:
    """How many requests the files hold (non-blank lines of JSON Lines files), for progress.

    Reads JSON Lines files line by line without parsing them; unreadable files count one.
    """
    total = 0
    for path in files:
        if not _is_jsonl(path):
            total += 1
            continue
        try:
            with path.open("rb") as fh:
                total += sum(1 for line in fh if line.strip())
        except OSError:
            total += 1
    return total


def _read_file(path: Path) -> Source:
    name, origin = request_stem(path), str(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        return Source(name, origin, error=f"cannot read: {getattr(e, 'strerror', None) or e}")
    try:
        return Source(name, origin, document=json.loads(text))
    except json.JSONDecodeError as e:
        return Source(name, origin,
                      error=f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}")
    except RecursionError:
        return Source(name, origin, error="JSON nested too deeply to read")


def _read_jsonl(path: Path) -> Iterator[Source]:
    stem = request_stem(path)
    try:
        fh = path.open(encoding="utf-8")
    except OSError as e:
        yield Source(stem, str(path), error=f"cannot read: {e.strerror or e}")
        return
    with fh:
        lineno = 0
        while True:
            try:
                line = fh.readline()
            except UnicodeDecodeError as e:
                yield Source(f"{stem}-{lineno + 1}", f"{path}:{lineno + 1}",
                             error=f"cannot read: {e}")
                return
            if not line:
                return
            lineno += 1
            if not line.strip():
                continue
            name, origin = f"{stem}-{lineno}", f"{path}:{lineno}"
            try:
                yield Source(name, origin, document=json.loads(line))
            except json.JSONDecodeError as e:
                yield Source(name, origin,
                             error=f"invalid JSON at column {e.colno}: {e.msg}")
            except RecursionError:
                yield Source(name, origin, error="JSON nested too deeply to read")


def iter_sources(files: Sequence[Path]) -> Iterator[Source]:
    """Every request of the files, lazily, in order; unreadable ones carry an error."""
    for path in files:
        if _is_jsonl(path):
            yield from _read_jsonl(path)
        else:
            yield _read_file(path)
