"""Go's `math/rand`, served by a tiny Go program of ours (`gorand.go`) run with the local Go.

The FGD paper's simulator (hkust-adsl/kubernetes-scheduler-simulator) draws its pod order
and its node preference from Go's `math/rand` seeded with the run's seed. To replay its
per-seed runs exactly we need the same numbers; rather than reimplement Go's generator we
ask Go for them: `gorand.go` only calls the standard library and answers one request per
line on a pipe. It is built once per process into a temporary folder (`go build`, a few
seconds; needs Debian's `golang-go` or any Go >= 1.13).

`NumpyRand` offers the same four draws from numpy's PCG64, for machines without Go (same
rules, different numbers: per-seed figures then differ from the paper's, means agree).
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Protocol

import numpy as np

SOURCE = Path(__file__).with_name("gorand.go")
_built: Path | None = None


class GoUnavailable(RuntimeError):
    """No Go toolchain to build `gorand.go` with."""


class OrderRand(Protocol):
    """The draws the arrival-order rules make, named after Go's `math/rand` methods."""

    def next_int(self) -> int:
        """A non-negative pseudo-random int (Go's `Int`)."""
        ...

    def intn(self, n: int) -> int:
        """A uniform int in [0, n) (Go's `Intn`)."""
        ...

    def shuffled(self, n: int) -> list[int]:
        """0..n-1 after an in-place shuffle (Go's `Shuffle(n, swap)` applied to them)."""
        ...

    def perm(self, n: int) -> list[int]:
        """A random permutation of 0..n-1 (Go's `Perm`)."""
        ...


class NumpyRand:
    """`OrderRand` from numpy's PCG64 (our own numbers, not Go's)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def next_int(self) -> int:
        """A non-negative 63-bit int."""
        return int(self.rng.integers(1 << 63))

    def intn(self, n: int) -> int:
        """A uniform int in [0, n)."""
        return int(self.rng.integers(n))

    def shuffled(self, n: int) -> list[int]:
        """A random permutation of 0..n-1."""
        return [int(i) for i in self.rng.permutation(n)]

    def perm(self, n: int) -> list[int]:
        """A random permutation of 0..n-1."""
        return [int(i) for i in self.rng.permutation(n)]


def go_binary() -> Path:
    """The built `gorand` program (built on first use); GoUnavailable without Go."""
    global _built
    if _built is not None and _built.exists():
        return _built
    go = shutil.which("go")
    if go is None:
        raise GoUnavailable("Go is not installed (apt-get install golang-go), "
                            "needed for the paper's per-seed orders")
    folder = Path(tempfile.mkdtemp(prefix="gpuplan-gorand-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    target = folder / "gorand"
    env_cache = folder / "cache"
    proc = subprocess.run(
        [go, "build", "-o", str(target), str(SOURCE)],
        capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": str(Path(go).parent), "HOME": str(folder), "GOCACHE": str(env_cache),
             "GOPATH": str(folder / "gopath"), "GO111MODULE": "off", "GOFLAGS": ""},
    )
    if proc.returncode != 0:
        raise GoUnavailable(f"go build {SOURCE.name} failed: {proc.stderr.strip()[:300]}")
    _built = target
    return target


class GoRand:
    """`OrderRand` answered by Go's `math/rand` seeded with `seed` (a child process).

    Use as a context manager, or call `close`.
    """

    def __init__(self, seed: int) -> None:
        self.proc = subprocess.Popen(
            [str(go_binary())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            bufsize=1)
        self._ask(f"seed {int(seed)}")

    def _ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer or answer.startswith("error"):
            raise RuntimeError(f"gorand: {line!r} -> {answer or 'no answer'}")
        return answer

    def next_int(self) -> int:
        """Go's `Int()`."""
        return int(self._ask("int"))

    def intn(self, n: int) -> int:
        """Go's `Intn(n)`."""
        return int(self._ask(f"intn {int(n)}"))

    def shuffled(self, n: int) -> list[int]:
        """0..n-1 after Go's `Shuffle(n, swap)`."""
        return [int(x) for x in self._ask(f"shuffle {int(n)}").split()]

    def perm(self, n: int) -> list[int]:
        """Go's `Perm(n)`."""
        return [int(x) for x in self._ask(f"perm {int(n)}").split()]

    def close(self) -> None:
        """End the child process."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> GoRand:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
