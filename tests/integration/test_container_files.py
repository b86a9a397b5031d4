"""The Dockerfile, .dockerignore and compose.yaml say what the docs promise, without Docker.

Nothing here builds an image or reaches the internet. The Dockerfile is read with a small
parser of its syntax (instructions, line continuations, comments), enough to check that
it runs as a user other than root, has a health check, and copies only files that exist
and that the build context does not leave out; the health check's own command is run
against a local server. compose.yaml and compose.postgres.yaml are parsed as YAML (PyYAML
comes with the test tools, through schemathesis; this machine has no `docker compose` to
validate them), and their services are checked against the CLI's commands, the
settings, and each other (the PostgreSQL variant's URL, password and health checks).
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import typer.main
import yaml

from ferryman.cli.main import app
from ferryman.config import WorkerSettings, known_variables
from ferryman.engines import engine_name
from ferryman.wiring import results_directory

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE = ROOT / "compose.yaml"
COMPOSE_POSTGRES = ROOT / "compose.postgres.yaml"
PYPROJECT = ROOT / "pyproject.toml"
# Every variable a setting reads: a typo in a compose file would be silently ignored.
KNOWN = known_variables()

# Every instruction the Dockerfile reference defines.
KNOWN_INSTRUCTIONS = frozenset(
    {
        "ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK",
        "LABEL", "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME",
        "WORKDIR",
    }
)  # fmt: skip
ROOT_USERS = frozenset({"root", "0"})


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: continuations joined, comments dropped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue  # a comment, also inside a continued instruction, as Docker reads it
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        keyword, _, arguments = pending.partition(" ")
        found.append((keyword.upper(), " ".join(arguments.split())))
        pending = ""
    if pending:
        raise ValueError(f"the Dockerfile ends inside a continued line: {pending!r}")
    return found


def _arguments(instructions: list[tuple[str, str]], keyword: str) -> list[str]:
    return [arguments for name, arguments in instructions if name == keyword]


def _index(instructions: list[tuple[str, str]], keyword: str) -> int:
    return next(i for i, (name, _) in enumerate(instructions) if name == keyword)


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore leaves ``path`` (or a folder holding it) out of the context."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        pattern = pattern.strip("/")
        if pattern.startswith("**/"):
            tail = pattern.removeprefix("**/")
            if any(fnmatch.fnmatch(part, tail) for part in parts):
                return True
        elif any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes):
            return True
    return False


def dockerignore_patterns() -> list[str]:
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    # Exceptions ("!path") would need Docker's full matching rules; this file has none.
    assert not [p for p in patterns if p.startswith("!")]
    return patterns


def cli_commands() -> set[str]:
    command = typer.main.get_command(app)
    return set(command.commands)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def instructions() -> list[tuple[str, str]]:
    return dockerfile_instructions(DOCKERFILE.read_text())


def _load(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load(COMPOSE)


@pytest.fixture(scope="module")
def compose_postgres() -> dict[str, Any]:
    return _load(COMPOSE_POSTGRES)


def test_the_parser_joins_continuations_and_drops_comments() -> None:
    text = "# a comment\nFROM python:3.11-slim\nRUN a \\\n    # inside\n    && b\n\nuser app\n"
    assert dockerfile_instructions(text) == [
        ("FROM", "python:3.11-slim"),
        ("RUN", "a && b"),
        ("USER", "app"),
    ]
    with pytest.raises(ValueError, match="continued"):
        dockerfile_instructions("RUN a \\\n")


def test_the_dockerfile_has_only_known_instructions_on_python_slim(
    instructions: list[tuple[str, str]],
) -> None:
    assert {name for name, _ in instructions} <= KNOWN_INSTRUCTIONS
    first = next(arguments for name, arguments in instructions if name != "ARG")
    assert instructions[_index(instructions, "FROM")][1] == first == "python:3.11-slim"
    assert len(_arguments(instructions, "FROM")) == 1


def test_the_image_runs_as_a_user_of_its_own_before_its_entry_point(
    instructions: list[tuple[str, str]],
) -> None:
    users = [(i, args) for i, (name, args) in enumerate(instructions) if name == "USER"]
    assert users, "no USER: the image would run as root"
    last_at, user = users[-1]
    name = user.split(":")[0]
    assert name not in ROOT_USERS
    assert last_at < _index(instructions, "ENTRYPOINT")
    assert last_at < _index(instructions, "CMD")
    # The user is made in the image, as a system user without a login shell.
    creating = [args for args in _arguments(instructions, "RUN") if "useradd" in args]
    assert creating and name in creating[0] and "nologin" in creating[0]


def test_every_copied_file_exists_and_is_in_the_build_context(
    instructions: list[tuple[str, str]],
) -> None:
    patterns = dockerignore_patterns()
    copies = _arguments(instructions, "COPY") + _arguments(instructions, "ADD")
    assert copies
    for arguments in copies:
        words = [w for w in shlex.split(arguments) if not w.startswith("--")]
        if arguments.startswith("["):
            words = json.loads(arguments)
        *sources, _destination = words
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
            assert not _ignored(source, patterns), f"COPY {source}: left out by .dockerignore"


def test_the_build_context_leaves_out_local_state_and_secrets() -> None:
    patterns = dockerignore_patterns()
    for path in (".venv", ".git", "ferryman.db", "ferryman-results", "ferryman.toml", ".env"):
        assert _ignored(path, patterns), path
    assert _ignored("src/ferryman/__pycache__/x.pyc", patterns)
    assert not _ignored("src/ferryman/adapters/sqlite/schema/0001_initial.sql", patterns)


def test_the_image_installs_the_extras_its_build_argument_names_the_server_by_default(
    instructions: list[tuple[str, str]],
) -> None:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    [argument] = _arguments(instructions, "ARG")
    name, _, default = argument.partition("=")
    assert (name, default) == ("EXTRAS", "server")
    [install] = [i for i, (n, a) in enumerate(instructions) if n == "RUN" and "pip install" in a]
    assert _index(instructions, "FROM") < _index(instructions, "ARG") < install
    assert '".[${EXTRAS}]"' in instructions[install][1]  # quoted: the shell expands it
    # The default and the documented alternative are extras, each bringing the server.
    assert "server" in extras
    assert "ferryman[server]" in extras["aws"] and any("boto3" in d for d in extras["aws"])


def test_the_image_keeps_its_data_on_a_volume(
    instructions: list[tuple[str, str]],
) -> None:
    assert "/data" in json.loads(_arguments(instructions, "VOLUME")[0])
    env: dict[str, str] = {}
    for arguments in _arguments(instructions, "ENV"):
        env.update(word.split("=", 1) for word in shlex.split(arguments))  # type: ignore[arg-type]
    assert env["FERRYMAN_DATABASE_URL"] == "sqlite:////data/ferryman.db"
    assert env["FERRYMAN_RESULTS_URL"].startswith("file:///data/")
    assert env["FERRYMAN_HOST"] == "0.0.0.0"  # reachable from outside the container
    assert _arguments(instructions, "EXPOSE") == [env["FERRYMAN_PORT"]] == ["8000"]
    # Exec form, so the signal a `docker stop` sends reaches ferryman itself.
    assert json.loads(_arguments(instructions, "ENTRYPOINT")[0]) == ["ferryman"]
    [default] = json.loads(_arguments(instructions, "CMD")[0])
    assert default in cli_commands()


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def health_server() -> Iterator[tuple[int, type[_Health]]]:
    handler = type("Health", (_Health,), {"status": 200})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _run_healthcheck(command: str, port: int) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["FERRYMAN_PORT"] = str(port)
    done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, timeout=30)
    return done.returncode


def test_the_healthcheck_asks_healthz_with_python_and_fails_on_anything_else(
    instructions: list[tuple[str, str]], health_server: tuple[int, type[_Health]]
) -> None:
    [healthcheck] = _arguments(instructions, "HEALTHCHECK")
    options, _, command = healthcheck.partition(" CMD ")
    assert all(option.startswith("--") for option in options.split())
    assert command.startswith("python ") and "/healthz" in command
    assert "curl" not in command and "wget" not in command  # neither is in a slim image
    port, handler = health_server
    assert _run_healthcheck(command, port) == 0
    handler.status = 503
    assert _run_healthcheck(command, port) != 0
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = closed.getsockname()[1]
    assert _run_healthcheck(command, nobody) != 0


def test_compose_runs_an_api_and_two_workers_of_this_image(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"api", "worker"}
    commands = cli_commands()
    for name, service in services.items():
        assert service["build"] == ".", f"{name} is not built from this repository"
        assert service["image"] == services["api"]["image"]
        [verb] = service["command"]
        assert verb == name and verb in commands
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["worker"]["healthcheck"] == {"disable": True}  # a worker serves no HTTP
    assert services["worker"]["depends_on"]["api"]["condition"] == "service_healthy"
    assert any(str(port).endswith(":8000:8000") for port in services["api"]["ports"])


def test_compose_shares_one_volume_and_lets_calls_in_flight_finish(
    compose: dict[str, Any],
) -> None:
    services = compose["services"].values()
    mounts = {tuple(service["volumes"]) for service in services}
    assert mounts == {("ferryman-data:/data",)}, "every container must use the same database"
    assert set(compose["volumes"]) == {"ferryman-data"}
    for service in services:
        assert "FERRYMAN_DATABASE_URL" not in service.get("environment", {})
        grace = WorkerSettings().shutdown_grace_seconds
        assert float(service["stop_grace_period"].removesuffix("s")) > grace


def _required_variable(value: str) -> str:
    """The variable of ``${NAME:?message}``: compose refuses to start without it."""
    match = re.fullmatch(r"\$\{([A-Z_]+):\?[^}]+\}", value)
    assert match, f"{value!r} is not a required variable"
    return match.group(1)


def test_the_postgres_variant_runs_postgres_an_api_and_two_workers(
    compose_postgres: dict[str, Any],
) -> None:
    services = compose_postgres["services"]
    assert set(services) == {"postgres", "api", "worker"}
    commands = cli_commands()
    for name in ("api", "worker"):
        service = services[name]
        assert service["build"] == "." and service["image"] == services["api"]["image"]
        assert service["command"] == [name] and name in commands
        grace = WorkerSettings().shutdown_grace_seconds
        assert float(service["stop_grace_period"].removesuffix("s")) > grace
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["worker"]["healthcheck"] == {"disable": True}
    assert any(str(port).startswith("127.0.0.1:") for port in services["api"]["ports"])
    # The database is reached by the containers only, its data kept on a volume.
    postgres = services["postgres"]
    assert postgres["image"].startswith("postgres:")
    assert "ports" not in postgres
    [mount] = postgres["volumes"]
    assert mount.split(":")[0] in compose_postgres["volumes"]


def test_the_postgres_variant_points_every_process_at_its_database(
    compose_postgres: dict[str, Any],
) -> None:
    services = compose_postgres["services"]
    database = services["postgres"]["environment"]
    user, name = database["POSTGRES_USER"], database["POSTGRES_DB"]
    for service in (services["api"], services["worker"]):
        env = service["environment"]
        url = env["FERRYMAN_DATABASE_URL"]
        assert url == f"postgresql://{user}@postgres:5432/{name}"
        assert engine_name(url) == "postgresql"
        # Results in the database: a container's own directory would be its only.
        assert results_directory(env["FERRYMAN_RESULTS_URL"]) is None
        # One password, required, in no file: libpq reads PGPASSWORD, the URL has none.
        assert _required_variable(env["PGPASSWORD"]) == _required_variable(
            database["POSTGRES_PASSWORD"]
        )
        assert not [k for k in env if k.startswith("FERRYMAN_") and k.upper() not in KNOWN]
        assert "volumes" not in service  # nothing of a process's own to share


def test_the_postgres_variant_starts_in_order_of_health(compose_postgres: dict[str, Any]) -> None:
    services = compose_postgres["services"]
    test = services["postgres"]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL" and test[1].startswith("pg_isready ")
    database = services["postgres"]["environment"]
    assert f"-U {database['POSTGRES_USER']}" in test[1]
    assert f"-d {database['POSTGRES_DB']}" in test[1]
    healthy = {"condition": "service_healthy"}
    assert services["api"]["depends_on"] == {"postgres": healthy}
    assert services["worker"]["depends_on"] == {"postgres": healthy, "api": healthy}
