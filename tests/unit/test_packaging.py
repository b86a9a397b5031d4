"""`pip install ferryman` is the client; `ferryman[server]` the service. Importing the
client never imports the server, and the command's client verbs run without it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = (
    "fastapi",
    "starlette",
    "uvicorn",
    "structlog",
    "prometheus_client",
    "jsonschema",
    "orjson",
    "ulid",
)
SERVER_MODULES = ("ferryman.http", "ferryman.services", "ferryman.wiring", "ferryman.adapters")
# Makes this interpreter behave as if only `pip install ferryman` had run.
WITHOUT_SERVER = f"""
import importlib.abc, sys

class WithoutServer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {SERVER_PACKAGES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, WithoutServer())
"""
NOWHERE_URL = "http://127.0.0.1:9"


def python(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "FERRYMAN_API_KEY": "fm_x"},
    )


def test_importing_the_client_imports_nothing_of_the_server() -> None:
    code = (
        "import sys, ferryman\n"
        "ferryman.Client, ferryman.AsyncClient, ferryman.Job\n"
        "import ferryman.client.models\n"
        f"print(sorted(m for m in sys.modules if m.partition('.')[0] in {SERVER_PACKAGES!r}"
        f" or m.startswith({SERVER_MODULES!r})))"
    )
    done = python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_client_works_without_the_server_s_dependencies() -> None:
    done = python(WITHOUT_SERVER + "import ferryman\nferryman.Client('http://x', 'k').close()")
    assert done.returncode == 0, done.stderr


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = WITHOUT_SERVER + "from ferryman.cli.main import app\napp(prog_name='ferryman')"
    return python(code, *args, cwd=cwd)


@pytest.mark.parametrize(
    "args", [("list",), ("status", "gen_1"), ("submit", "--task", "t", "--input", "{}")]
)
def test_the_client_verbs_run_without_the_server(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = run_cli(*args, "--url", NOWHERE_URL, cwd=tmp_path)
    assert done.returncode == 1  # they ran, and found no server there
    assert f"cannot reach ferryman at {NOWHERE_URL}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [("serve",), ("worker",), ("migrate",), ("doctor",), ("keys", "list"), ("dlq", "list"),
     ("pause", "intake", "--reason", "x"), ("status",), ("purge", "--older-than", "1d")],
)  # fmt: skip
def test_a_server_verb_without_the_server_names_the_extra(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    done = run_cli(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "pip install 'ferryman[server]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing was made


def test_the_help_lists_every_command_without_the_server(tmp_path: Path) -> None:
    done = run_cli("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout and "submit" in done.stdout


def project() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def names(requirements: object) -> set[str]:
    assert isinstance(requirements, list)
    return {r.split(">")[0].split("=")[0].split("[")[0].strip().lower() for r in requirements}


def test_the_base_install_holds_no_server_dependency() -> None:
    meta = project()
    base = names(meta["dependencies"])
    extras = meta["optional-dependencies"]
    assert isinstance(extras, dict)
    server = names(extras["server"])
    assert {"httpx", "pydantic"} <= base
    assert {"fastapi", "uvicorn", "structlog", "prometheus-client", "jsonschema"} <= server
    assert not base & server
    assert not base & {"fastapi", "uvicorn", "structlog", "prometheus-client", "orjson"}


def test_the_ci_installs_the_server_and_the_tests() -> None:
    assert "-e '.[server,test]'" in (ROOT / ".ci" / "run").read_text()


def test_licence_and_urls_are_declared() -> None:
    meta = project()
    assert meta["license"] == "Apache-2.0"
    assert meta["license-files"] == ["LICENSE"]
    urls = meta["urls"]
    assert isinstance(urls, dict)
    assert set(urls) == {"Homepage", "Documentation", "Changelog", "Issues"}
    assert all(
        str(url).startswith("https://github.com/ferryman-dev/ferryman") for url in urls.values()
    )
    assert "Typing :: Typed" in meta["classifiers"]  # type: ignore[operator]
