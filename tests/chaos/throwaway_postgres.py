"""A PostgreSQL server of the test's own: initdb into a temporary directory, started on a
free port of 127.0.0.1, stopped and removed at the end whatever happened.

A test that restarts a server restarts this one, never the machine's: other sessions
(other suites, other people) use that one at the same time.

initdb and postgres refuse to run as root, so under root the server runs as the
unprivileged ``postgres`` user (through ``runuser``) in a directory that user owns;
otherwise as the current user. The binaries are found through ``pg_config --bindir``,
then ``/usr/lib/postgresql/<version>/bin`` (Debian's layout), then ``PATH``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

SERVER_PROGRAMS = ("initdb", "pg_ctl", "postgres")
HOW_TO_GET = (
    "install the PostgreSQL server binaries (Debian/Ubuntu: apt-get install postgresql; "
    "macOS: brew install postgresql) so that pg_config --bindir or PATH finds initdb"
)
# Debian's layout: one directory of binaries per major version.
DEBIAN_BINDIRS = "/usr/lib/postgresql/*/bin"
UNPRIVILEGED_USER = "postgres"
START_ATTEMPTS = 5
TIMEOUT_SECONDS = 120


class ServerUnavailableError(Exception):
    """The throwaway server cannot be made on this machine (the message says why)."""


def _has_server_programs(directory: str | os.PathLike[str]) -> bool:
    return all(os.access(Path(directory) / p, os.X_OK) for p in SERVER_PROGRAMS)


def _version_key(bindir: str) -> tuple[int, ...]:
    version = Path(bindir).parent.name
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def find_bindir() -> Path:
    """The directory holding initdb, pg_ctl and postgres, or ServerUnavailableError."""
    candidates: list[str] = []
    with suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, timeout=30, check=True
        )
        candidates.append(found.stdout.strip())
    candidates += sorted(glob.glob(DEBIAN_BINDIRS), key=_version_key, reverse=True)
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(str(Path(initdb).resolve().parent))
    for candidate in candidates:
        if candidate and _has_server_programs(candidate):
            return Path(candidate)
    raise ServerUnavailableError(
        f"no PostgreSQL server binaries ({', '.join(SERVER_PROGRAMS)}) found: {HOW_TO_GET}"
    )


def _run_as() -> tuple[list[str], pwd.struct_passwd | None]:
    """The command prefix that drops root, and the user it drops to (None: as we are)."""
    if os.geteuid() != 0:
        return [], None
    try:
        user = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        raise ServerUnavailableError(
            f"running as root, which initdb refuses, and there is no {UNPRIVILEGED_USER!r} "
            "user to run the server as: run the tests as an ordinary user, or create one "
            f"(useradd --system {UNPRIVILEGED_USER})"
        ) from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise ServerUnavailableError(
            "running as root, which initdb refuses, and runuser (util-linux) is missing"
        )
    return [runuser, "-u", UNPRIVILEGED_USER, "--"], user


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ThrowawayPostgres:
    """One running server; ``url`` reaches its ``postgres`` database as user postgres,
    without a password (trust, on 127.0.0.1 only)."""

    bindir: Path
    directory: Path
    prefix: list[str]
    port: int = 0

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.prefix, str(self.bindir / program), *args],
            cwd=self.directory,  # a directory the server's user may enter
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed: {done.stdout}{done.stderr}")
        return done

    def _pg_ctl(
        self, action: str, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self._pg(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            *args,
            action,
            check=check,
        )

    def init(self) -> None:
        self._pg(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--no-locale", "--no-sync",
        )  # fmt: skip

    def start(self) -> None:
        """Start on a free port of 127.0.0.1 (another free one if it was taken meanwhile);
        the socket file stays in our directory, out of every other server's way."""
        for _ in range(START_ATTEMPTS):
            self.port = _free_port()
            settings = (
                "listen_addresses = '127.0.0.1'\n"
                f"port = {self.port}\n"
                f"unix_socket_directories = '{self.directory}'\n"
            )
            # Appended (the last setting wins); the file keeps its owner, the server's user.
            with (self.data / "postgresql.conf").open("a") as conf:
                conf.write(settings)
            if self._pg_ctl("start", check=False).returncode == 0:
                return
        raise ServerUnavailableError(f"the throwaway server did not start: {self._log_tail()}")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            return None

    def restart(self) -> None:
        """Fast shutdown (every session ends) and start again; returns once the new
        postmaster accepts connections, and fails unless it really is a new one."""
        before = self.postmaster_pid()
        done = self._pg_ctl("restart", "-m", "fast", check=False)
        assert done.returncode == 0, f"restart failed: {done.stderr}{self._log_tail()}"
        after = self.postmaster_pid()
        assert after is not None and after != before, (before, after)

    def stop(self) -> None:
        """Immediate shutdown; if pg_ctl cannot, the postmaster we started is ended."""
        if not (self.data / "postmaster.pid").exists():
            return
        if self._pg_ctl("stop", "-m", "immediate", check=False).returncode == 0:
            return
        pid = self.postmaster_pid()
        if pid is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)  # the postmaster's own immediate shutdown
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no server log)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    """A running server of our own, stopped and deleted on the way out (even on error).

    Raises ServerUnavailableError, before anything is made, when the binaries or an
    unprivileged user to run them are missing.
    """
    bindir = find_bindir()
    prefix, user = _run_as()
    directory = Path(tempfile.mkdtemp(prefix="ferryman-pg-"))
    try:
        if user is not None:
            os.chown(directory, user.pw_uid, user.pw_gid)
        server = ThrowawayPostgres(bindir=bindir, directory=directory, prefix=prefix)
        try:
            server.init()
            server.start()
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    """``python tests/chaos/throwaway_postgres.py``: can this machine make one? (.ci/services)"""
    try:
        bindir = find_bindir()
        _, user = _run_as()
    except ServerUnavailableError as exc:
        print(exc)
        return 1
    print(bindir if user is None else f"{bindir} (run as user {user.pw_name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
