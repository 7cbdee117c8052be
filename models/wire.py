"""JSON as the wire contract accepts it, for every reader of requests and plans.

Python's `json` module accepts more than JSON: `NaN`, `Infinity` and `-Infinity`, numbers
so large that they become infinite (`1e400`), and strings or object keys holding lone
UTF-16 surrogates (`"\\ud800"`), which no UTF-8 output can carry. It also fails with
RecursionError on deeply nested input and with UnicodeDecodeError on bytes that are not
text. `load_wire_json` turns all of these into one `WireJSONError` that lists each problem
with its path, so that the HTTP service answers 422 and the CLI exits 2 with one line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass

Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class WireProblem:
    """One problem: where (a path into the document), an error type and a message."""

    loc: Loc
    type: str
    msg: str


class WireJSONError(ValueError):
    """The input is not JSON as the wire contract accepts it; `problems` says where."""

    def __init__(self, problems: list[WireProblem]) -> None:
        super().__init__("; ".join(
            f"{'.'.join(map(str, p.loc)) or '(root)'}: {p.msg}" for p in problems[:3]))
        self.problems = problems


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def escaped(text: str) -> str:
    """`text` with lone surrogates written as `\\udXXX` escapes (always UTF-8 encodable)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def non_wire_values(data: object) -> Iterator[WireProblem]:
    """Every non-finite number and every string or key that is not valid Unicode (lone
    surrogates) in parsed JSON; iterative, so any depth is fine."""
    stack: list[tuple[Loc, object]] = [((), data)]
    while stack:
        loc, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            yield WireProblem(loc, "finite_number", "Input should be a finite number")
        elif isinstance(value, str) and not _encodable(value):
            yield WireProblem(loc, "string_unicode",
                              "Input should be valid Unicode (no lone surrogates)")
        elif isinstance(value, dict):
            for key, item in value.items():
                if not _encodable(key):
                    yield WireProblem((*loc, escaped(key)), "string_unicode",
                                      "Object keys should be valid Unicode (no lone surrogates)")
                    continue
                stack.append(((*loc, key), item))
        elif isinstance(value, list):
            stack.extend(((*loc, i), item) for i, item in enumerate(value))


def load_wire_json(raw: bytes | str) -> object:
    """Parse `raw` (UTF-8, -16 or -32 bytes, or text); raise WireJSONError unless it is JSON
    with finite numbers and valid Unicode only."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise WireJSONError([WireProblem(
            (e.pos,), "json_invalid",
            f"JSON decode error: {e.msg} at line {e.lineno} column {e.colno}")]) from None
    except RecursionError:
        raise WireJSONError([WireProblem((), "json_invalid", "JSON nested too deeply")]
                            ) from None
    except ValueError as e:  # not UTF-8/16/32 text, or an integer with too many digits
        raise WireJSONError([WireProblem(
            (), "json_invalid", f"not decodable JSON ({type(e).__name__})")]) from None
    problems = list(non_wire_values(data))
    if problems:
        raise WireJSONError(problems)
    return data
