"""A throwaway PostgreSQL server for the store tests, started from the system's binaries.

`initdb` and `pg_ctl` come from PATH or /usr/lib/postgresql/*/bin (Debian's `postgresql`
package; `.ci/run` installs it). PostgreSQL refuses to run as root, so under root the
server runs as the `postgres` user (via `runuser`). It listens on a free loopback port with
trust auth, in a temporary directory removed afterwards. Each test gets a fresh database.
Where no server can be started, the PostgreSQL cases skip and say why.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.api.conftest import free_port

BACKENDS = ("sqlite", "postgresql")


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += [Path(d) for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    return next((d for d in candidates if (d / "initdb").exists() and (d / "pg_ctl").exists()),
                None)


class PgServer:
    """One PostgreSQL cluster in a temporary directory on a free 127.0.0.1 port."""

    def __init__(self) -> None:
        self.bin = _pg_bin()
        self.dir: Path | None = None
        self.port = 0
        self._as: list[str] = []
        self._dbs = itertools.count()

    def start(self) -> None:
        """initdb + pg_ctl start; raises RuntimeError saying why it cannot."""
        if self.bin is None:
            raise RuntimeError("no initdb/pg_ctl found (apt-get install postgresql)")
        self.dir = Path(tempfile.mkdtemp(prefix="gpuplan-pg-"))
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError as e:
                raise RuntimeError("running as root and there is no 'postgres' user") from e
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.port = free_port()
        data = self.dir / "data"
        self._run("initdb", "-D", str(data), "-U", "gpuplan", "--auth=trust", "-E", "UTF8",
                  "--no-locale", "--no-sync")
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run("pg_ctl", "-D", str(data), "-l", str(self.dir / "log"), "-o", opts,
                  "-w", "-t", "60", "start")

    def _run(self, tool: str, *args: str) -> None:
        assert self.bin is not None
        r = subprocess.run([*self._as, str(self.bin / tool), *args], capture_output=True,
                           text=True, timeout=120, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"{tool} failed: {(r.stderr or r.stdout).strip()[-500:]}")

    def url(self, db: str = "postgres") -> str:
        """Connection URL of database `db`."""
        return f"postgresql://gpuplan@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        """Create an empty database; its URL."""
        name = f"t{next(self._dbs)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        if self.dir is None:
            return
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's PostgreSQL server (skips the test where none can run)."""
    server = PgServer()
    try:
        server.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        server.stop()
        pytest.skip(f"no PostgreSQL server could be started here: {e}")
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """URL of a fresh, empty PostgreSQL database."""
    return pg_server.new_database()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL on each backend: an SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'solves.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url
