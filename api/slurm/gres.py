"""Slurm's GRES, TRES and host-list strings, parsed exactly (nothing fuzzy).

Forms read here, as Slurm 22.05+ prints them:

- node GRES (`sinfo`/`scontrol` `gres`): `gpu:a100:2,gpu:1g.5gb:7`, with sockets
  `gpu:a100:2(S:0-1)`; untyped `gpu:4`;
- node or job usage with device indices (`gres_used`, a job's `gres_detail`):
  `gpu:a100:1(IDX:0),gpu:1g.5gb:3(IDX:2-4)`, `gpu:1g.5gb:0(IDX:N/A)`, `gpu:0(IDX:)`;
- a job's GPU request (`tres_per_node`, `tres_per_job`, `memory_per_tres`, `cpus_per_tres`):
  `gres:gpu:a100:2` (22.05) or `gres/gpu:a100=2` (23.02+), several joined by commas;
- host lists: `gpu[01-03,07],login1`.

Only the `gpu` GRES is read; other GRES names are returned so callers can report them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GPU = "gpu"


class GresError(ValueError):
    """A GRES, TRES or host-list string that does not parse."""


@dataclass(frozen=True, slots=True)
class GresItem:
    """One `name[:type]:count` item, with the device indices when Slurm printed them."""

    name: str
    type: str | None
    count: int
    indices: tuple[int, ...] | None = None


_COUNT = re.compile(r"^(\d+)([KMGTP]?)$")
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def _count(text: str, whole: str) -> int:
    m = _COUNT.match(text)
    if m is None:
        raise GresError(f"{whole!r}: count {text!r} is not a number")
    return int(m.group(1)) * _SUFFIX[m.group(2)]


def parse_ranges(text: str) -> tuple[int, ...]:
    """`0-2,5` -> (0, 1, 2, 5); '' and `N/A` -> ()."""
    text = text.strip()
    if text in ("", "N/A"):
        return ()
    out: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise GresError(f"bad index range {text!r}")
        out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return tuple(out)


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses (`(S:0-1)` and `(IDX:0,2)` contain commas)."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


def parse_gres(text: str | None) -> list[GresItem]:
    """Parse a node's `gres` / `gres_used` or a job's `gres_detail` entry.

    `(S:...)` socket affinity is dropped; `(IDX:...)` gives `indices`. An empty string,
    `(null)` and `N/A` mean no GRES.
    """
    if text is None or text.strip() in ("", "(null)", "N/A"):
        return []
    items: list[GresItem] = []
    for raw in _split_top(text):
        body, _, extra = raw.partition("(")
        indices: tuple[int, ...] | None = None
        if extra:
            if not extra.endswith(")"):
                raise GresError(f"{raw!r}: unbalanced parentheses")
            key, _, value = extra[:-1].partition(":")
            if key == "IDX":
                indices = parse_ranges(value)
            elif key != "S":
                raise GresError(f"{raw!r}: unknown qualifier {key!r}")
        parts = body.split(":")
        if len(parts) == 1:
            items.append(GresItem(parts[0], None, 1, indices))
        elif len(parts) == 2:
            # `gpu:4` (count) or `gpu:a100` (type, count 1).
            if _COUNT.match(parts[1]):
                items.append(GresItem(parts[0], None, _count(parts[1], raw), indices))
            else:
                items.append(GresItem(parts[0], parts[1], 1, indices))
        elif len(parts) == 3:
            items.append(GresItem(parts[0], parts[1] or None, _count(parts[2], raw), indices))
        else:
            raise GresError(f"{raw!r}: expected name[:type]:count")
        if not items[-1].name:
            raise GresError(f"{raw!r}: empty GRES name")
    return items


def parse_tres(text: str | None) -> list[GresItem]:
    """Parse a job's `tres_per_node` / `tres_per_job` / `*_per_tres` string.

    Items are `gres:<name>[:<type>]:<count>` (22.05), `gres/<name>[:<type>]=<count>`
    (23.02+) or bare `<name>[:<type>]:<count>`; non-GRES TRES (`cpu=2`, `mem=1G`,
    `license/...`) are ignored.
    """
    if text is None or text.strip() in ("", "(null)", "N/A"):
        return []
    out: list[GresItem] = []
    for raw in _split_top(text):
        item = raw
        if item.startswith("gres/"):
            name_type, sep, count = item[len("gres/"):].partition("=")
            item = f"{name_type}:{count}" if sep else name_type
        elif item.startswith("gres:"):
            item = item[len("gres:"):]
        elif "=" in item or "/" in item:
            continue
        out.extend(parse_gres(item))
    return out


def gpu_items(items: list[GresItem]) -> list[GresItem]:
    """The `gpu` items of a parsed GRES/TRES list."""
    return [i for i in items if i.name == GPU]


_HOST = re.compile(r"([^,\[\]]*)(?:\[([^\]]*)\])?([^,\[\]]*)")


def expand_hostlist(text: str | None) -> list[str]:
    """`gpu[01-02,07],cpu1` -> ['gpu01', 'gpu02', 'gpu07', 'cpu1'] (zero padding kept)."""
    if text is None or text.strip() in ("", "(null)", "None assigned"):
        return []
    out: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _HOST.match(text, pos)
        if m is None or m.end() == pos:
            raise GresError(f"bad host list {text!r}")
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            out.append(prefix + suffix)
        else:
            for part in ranges.split(","):
                lo, sep, hi = part.partition("-")
                if not lo.isdigit() or (sep and not hi.isdigit()):
                    raise GresError(f"bad host list {text!r}")
                width = len(lo)
                for n in range(int(lo), int(hi) + 1 if sep else int(lo) + 1):
                    out.append(f"{prefix}{n:0{width}d}{suffix}")
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                raise GresError(f"bad host list {text!r}")
            pos += 1
    return out
