"""Keep native solver chatter off stdout (the CLI's stdout carries only the plan JSON).

HiGHS prints a banner the first time a `Highs()` is created in a process, whatever its
`output_flag`; `new_highs()` creates one silently.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import highspy


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Send native writes to file descriptor 1 to /dev/null while the block runs."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def new_highs() -> highspy.Highs:
    """A `highspy.Highs()` with logging off, created without printing its banner."""
    with quiet_stdout():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h
