"""A throwaway PostgreSQL server for the tests and the benchmark.

`TempPostgres` runs Debian's server binaries (`/usr/lib/postgresql/<ver>/bin`,
or `initdb` on PATH) on a free TCP port of 127.0.0.1 with its data in a new
temporary directory, and deletes everything on `stop`. PostgreSQL refuses to
run as root, so as root (CI) the server runs as the `postgres` system user
that the Debian package creates, in a directory that user owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path


def find_bindir() -> Path | None:
    """The folder holding `initdb` and `pg_ctl`, or None."""
    env = os.environ.get("MEMALIGN_PG_BINDIR")
    candidates = [env] if env else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TempPostgres:
    """A PostgreSQL server in a temporary directory (see the module doc)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="memalign-pg-"))
        self.data = self.root / "data"
        self._as: list[str] = []
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._as, *args], check=True, capture_output=True, text=True, cwd=self.root
        )

    def start(self) -> TempPostgres:
        """initdb, then start the server and wait until it accepts connections."""
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "memalign",
            "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l",
            str(self.root / "log"), "-w", "-t", "60", "start",
        )  # fmt: skip
        return self

    def url(self, database: str = "postgres") -> str:
        """A connection URL for `database`."""
        return f"postgresql://memalign@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """Create an empty database; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        """Stop the server and delete its directory."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def wait_for(predicate: object, timeout: float = 30.0) -> None:
    """Poll a callable until it returns true (for cross-process tests)."""
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.05)
