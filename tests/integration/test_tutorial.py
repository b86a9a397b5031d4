"""docs/tutorial.md runs as written: every ```sh block, in order, with its documented outcome.

The blocks run in one bash process, so variables and functions carry from one block to
the next as in a reader's terminal, in a fresh directory, with the installed ``ferryman``
first on PATH. HTML comments in the tutorial say what a reader does by hand:

    <!-- tutorial: skip ... -->                 the next block is not run (the install)
    <!-- tutorial: background NAME ready=R -->  the next block is a long-running process
                                                (another terminal): it runs in the
                                                background, ready once /healthz answers
                                                (R = healthz) or its output shows TEXT
                                                (R = log:TEXT)
    <!-- tutorial: stop NAME -->                Ctrl-C for that process: SIGINT, after
                                                which it must exit 0
    <!-- tutorial: exit N timeout=S -->         the next block's exit status (default 0)
                                                and time limit (default 60 s)

A ```text block after a command block (before the next block or directive) is what that
block prints: each of its lines must appear in the block's output (stdout and stderr
together), in order, with ``...`` standing for anything. The server listens on a free port: FERRYMAN_PORT and FERRYMAN_URL
are set for every process, and the documented address 127.0.0.1:8000 is replaced in the
blocks.

The tour runs twice: on the default embedded engine, as a reader runs it, and on the
AWS engine (FERRYMAN_DATABASE_URL=aws://NAME on the emulator the session starts, after
one ``ferryman migrate``), where every documented outcome holds as written.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
README = ROOT / "README.md"
DOCUMENTED_ADDRESS = "127.0.0.1:8000"
DEFAULT_TIMEOUT_SECONDS = 60.0
READY_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 40.0
# A reader who takes a while to switch terminals before starting a worker (or a busy
# machine): longer than the tour's lease (3 s) plus the sweeper's stall threshold
# (lease + visibility, 7 s), so the worker's sweeper finds the crashed job stalled as
# well as waiting for it, and step 6's history must still read as shown.
SLOW_READER_PAUSE_SECONDS = 15.0

_DIRECTIVE = re.compile(r"^<!--\s*tutorial:\s*(.*?)\s*-->$")


@dataclass
class Step:
    """One thing the tutorial has its reader do."""

    kind: str  # run | background | stop | skip
    line: int  # where it is in the tutorial, for messages
    script: str = ""
    name: str = ""
    ready: str = ""
    exit_code: int = 0
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    expected: list[str] = field(default_factory=list)


def _directive(text: str, line: int) -> tuple[str, dict[str, str]]:
    """A directive's verb and its settings; positional words go in ``args``."""
    words = text.split()
    verb = words[0] if words else ""
    settings: dict[str, str] = {}
    positional: list[str] = []
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if eq:
            settings[key] = value
        else:
            positional.append(word)
    if "=" in verb:  # e.g. "timeout=60" alone
        key, _, value = verb.partition("=")
        settings[key], verb = value, "run"
    if verb not in {"skip", "background", "stop", "exit", "run"}:
        raise ValueError(f"tutorial.md:{line}: unknown directive {text!r}")
    settings["args"] = " ".join(positional)
    return verb, settings


def _pending_step(verb: str, settings: dict[str, str], line: int) -> Step:
    step = Step(kind="run", line=line)
    if verb == "skip":
        step.kind = "skip"
    elif verb == "background":
        step.kind, step.name, step.ready = "background", settings["args"], settings.get("ready", "")
        if not step.name or not step.ready:
            raise ValueError(f"tutorial.md:{line}: a background block needs a name and ready=")
    elif verb == "exit":
        step.exit_code = int(settings["args"].split()[0])
    if "timeout" in settings:
        step.timeout_seconds = float(settings["timeout"])
    return step


def parse_tutorial(text: str) -> list[Step]:
    """The tutorial's steps, in order."""
    steps: list[Step] = []
    pending: Step | None = None
    fence: str | None = None  # the language of the open fenced block
    body: list[str] = []
    output_may_follow = False  # no directive since the last command block
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if fence is not None:
            if line.startswith("```"):
                if fence == "sh":
                    step = pending or Step(kind="run", line=number)
                    step.script, step.line = "\n".join(body) + "\n", number
                    steps.append(step)
                    pending, output_may_follow = None, step.kind == "run"
                elif fence == "text" and output_may_follow:
                    steps[-1].expected.extend(body)
                fence, body = None, []
            else:
                body.append(line)
            continue
        if line.startswith("```"):
            fence = line.removeprefix("```").strip()
            continue
        match = _DIRECTIVE.match(line)
        if match is None:
            continue  # prose
        output_may_follow = False
        verb, settings = _directive(match.group(1), number)
        if verb == "stop":
            steps.append(Step(kind="stop", line=number, name=settings["args"]))
        else:
            pending = _pending_step(verb, settings, number)
    if fence is not None or pending is not None:
        raise ValueError("tutorial.md ends inside a block, or with a directive for no block")
    return steps


def first_missing_line(expected: list[str], output: str) -> str | None:
    """The first expected line that does not appear (in order) in the output, or None."""
    lines = output.splitlines()
    at = 0
    for want in expected:
        want = want.strip()
        if not want or want == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")))
        while at < len(lines) and not pattern.search(lines[at]):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Background:
    process: subprocess.Popen[bytes]
    log: Path
    log_file: IO[bytes]

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Reader:
    """Does what the tutorial says, as a reader with three terminals would; a slow one
    takes ``pause_before_worker_seconds`` before starting each worker."""

    def __init__(
        self,
        workdir: Path,
        harness: Path,
        env: dict[str, str],
        port: int,
        *,
        pause_before_worker_seconds: float = 0.0,
    ) -> None:
        self.workdir, self.harness, self.env, self.port = workdir, harness, env, port
        self.pause_before_worker_seconds = pause_before_worker_seconds
        self.background: dict[str, Background] = {}
        # Terminal 2: one shell for every command block.
        self.shell = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        self._blocks = 0

    def script(self, step: Step) -> str:
        return step.script.replace(DOCUMENTED_ADDRESS, f"127.0.0.1:{self.port}")

    def run(self, step: Step) -> None:
        self._blocks += 1
        block = self.harness / f"block-{self._blocks}.sh"
        out = self.harness / f"block-{self._blocks}.out"
        status = self.harness / f"block-{self._blocks}.status"
        block.write_text(self.script(step))
        command = f"source {block} </dev/null >{out} 2>&1; echo $? >{status}.tmp; mv {status}.tmp {status}\n"
        assert self.shell.stdin is not None
        self.shell.stdin.write(command.encode())
        self.shell.stdin.flush()
        deadline = time.monotonic() + step.timeout_seconds
        while not status.exists():
            if self.shell.poll() is not None:
                pytest.fail(f"tutorial.md:{step.line}: the shell exited\n{_read(out)}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"tutorial.md:{step.line}: still running after {step.timeout_seconds:g}s\n"
                    f"{step.script}\n--- output so far ---\n{_read(out)}{self._logs()}"
                )
            time.sleep(0.1)
        code, output = int(status.read_text()), _read(out)
        assert code == step.exit_code, (
            f"tutorial.md:{step.line}: exit status {code}, the tutorial says {step.exit_code}\n"
            f"{step.script}\n--- output ---\n{output}{self._logs()}"
        )
        missing = first_missing_line(step.expected, output)
        assert missing is None, (
            f"tutorial.md:{step.line}: the output lacks {missing!r} (or has it out of order)\n"
            f"{step.script}\n--- output ---\n{output}"
        )

    def start(self, step: Step) -> None:
        assert step.name not in self.background, f"{step.name} is already running"
        if step.name == "worker":
            # The reader's own pace, not a wait for something to happen.
            time.sleep(self.pause_before_worker_seconds)
        log = self.harness / f"{step.name}-{step.line}.log"
        log_file = log.open("wb")
        process = subprocess.Popen(
            ["bash", "-c", self.script(step)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=self.env,
            start_new_session=True,
        )
        running = self.background[step.name] = Background(process, log, log_file)
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not self._ready(step.ready, running):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"tutorial.md:{step.line}: {step.name} never became ready "
                    f"({step.ready})\n{running.output()}"
                )
            time.sleep(0.2)

    def _ready(self, ready: str, running: Background) -> bool:
        if ready == "healthz":
            try:
                answer = httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2.0)
            except httpx.TransportError:
                return False
            return answer.status_code == 200
        if ready.startswith("log:"):
            return ready.removeprefix("log:") in running.output()
        raise ValueError(f"unknown ready condition {ready!r}")

    def stop(self, step: Step) -> None:
        """Ctrl-C: SIGINT to the process's group; ferryman stops gracefully, exit 0."""
        running = self.background.pop(step.name, None)
        assert running is not None, f"tutorial.md:{step.line}: {step.name} is not running"
        os.killpg(running.process.pid, signal.SIGINT)
        try:
            code = running.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        finally:
            running.log_file.close()
        assert code == 0, f"tutorial.md:{step.line}: {step.name} exited {code}\n{running.output()}"

    def _logs(self) -> str:
        return "".join(
            f"\n--- {name} ---\n{running.output()[-4000:]}"
            for name, running in self.background.items()
        )

    def close(self) -> None:
        for running in self.background.values():
            _terminate(running.process)
            running.log_file.close()
        self.background.clear()
        if self.shell.stdin is not None:
            self.shell.stdin.close()
        _terminate(self.shell)


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_SECONDS)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_the_tutorial_is_well_formed_and_installs_as_the_readme_does() -> None:
    steps = parse_tutorial(TUTORIAL.read_text())
    kinds = [step.kind for step in steps]
    # The install is the one block a reader runs that the test cannot (it would reach
    # a package index); everything after it runs.
    assert kinds[0] == "skip" and kinds.count("skip") == 1
    assert "pip install -e '.[server]'" in steps[0].script
    assert "pip install -e '.[server]'" in README.read_text()
    started = {step.name for step in steps if step.kind == "background"}
    stopped = {step.name for step in steps if step.kind == "stop"}
    assert started == stopped == {"server", "api", "worker"}
    # Every command block says what it prints, except the one that defines shell helpers.
    runs = [step for step in steps if step.kind == "run"]
    unchecked = [step.line for step in runs if not step.expected]
    assert len(unchecked) == 1, f"blocks with no documented outcome at lines {unchecked}"


def test_the_output_check_needs_every_line_in_order() -> None:
    output = 'a gen_123 b\n{\n  "text": "echo: hi"\n}\n'
    assert first_missing_line(["gen_...", '"text": "echo: hi"'], output) is None
    assert first_missing_line(['"text": "echo: hi"', "gen_..."], output) == "gen_..."
    assert first_missing_line(["gen_999"], output) == "gen_999"


def _readers_environment() -> dict[str, str]:
    """The test's environment without its FERRYMAN_* settings, the installed
    ``ferryman`` first on PATH."""
    ferryman = Path(sys.executable).parent / "ferryman"
    assert ferryman.exists(), f"the ferryman command is not installed next to {sys.executable}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env["PATH"] = f"{ferryman.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _follow(
    tmp_path: Path,
    steps: list[Step],
    *,
    pause_before_worker_seconds: float,
    engine_env: dict[str, str] | None = None,
) -> Path:
    """Do the steps in a fresh directory, the installed ``ferryman`` first on PATH, with
    ``engine_env`` in every process's environment; the directory the tour ran in."""
    port = free_port()
    env = _readers_environment()
    env.update(
        FERRYMAN_PORT=str(port),
        FERRYMAN_URL=f"http://127.0.0.1:{port}",
        **(engine_env or {}),
    )
    workdir, harness = tmp_path / "tour", tmp_path / "harness"
    workdir.mkdir()
    harness.mkdir()
    reader = Reader(
        workdir, harness, env, port, pause_before_worker_seconds=pause_before_worker_seconds
    )
    try:
        for step in steps:
            if step.kind == "run":
                reader.run(step)
            elif step.kind == "background":
                reader.start(step)
            elif step.kind == "stop":
                reader.stop(step)
    finally:
        reader.close()
    return workdir


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_command_of_the_tutorial_runs_as_documented(tmp_path: Path) -> None:
    steps = parse_tutorial(TUTORIAL.read_text())
    workdir = _follow(tmp_path, steps, pause_before_worker_seconds=0.0)
    assert (workdir / "ferryman.db").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_reader_slow_to_start_the_worker_sees_the_history_step_6_shows(
    tmp_path: Path,
) -> None:
    # Up to step 6's history of the crashed job: the worker that takes it over starts
    # well after the crash, as on a busy machine or with a reader who takes their time.
    steps = parse_tutorial(TUTORIAL.read_text())
    last = next(i for i, step in enumerate(steps) if 'job_history "$CRASH_JOB"' in step.script)
    assert "ATTEMPT_ABANDONED" in "\n".join(steps[last].expected)
    _follow(tmp_path, steps[: last + 1], pause_before_worker_seconds=SLOW_READER_PAUSE_SECONDS)


def _tour_setting(steps: list[Step], name: str) -> str:
    """The value the tour's ferryman.toml gives ``name`` (written by one of its blocks)."""
    written = "".join(step.script for step in steps)
    found = re.findall(rf"^{re.escape(name)} = (\S+)$", written, re.MULTILINE)
    assert len(found) == 1, f"the tutorial's ferryman.toml sets {name} {len(found)} times"
    return str(found[0])


async def _tenant_job_statuses(database_url: str, tenant_id: str) -> list[str]:
    """The status of each of the tenant's jobs, as the AWS engine's table holds them."""
    from ferryman.adapters.aws import layout
    from ferryman.adapters.aws.clients import open_clients
    from ferryman.adapters.aws.location import parse_aws_url

    partition, _ = layout.index_keys(layout.INDEX_BY_TENANT)
    table = parse_aws_url(database_url).table
    async with open_clients() as clients:
        # The tenant's list index names the jobs; each job's own item has its status.
        answer = await clients.dynamodb.query(
            TableName=table,
            IndexName=layout.INDEX_BY_TENANT,
            KeyConditionExpression="#p = :p",
            ExpressionAttributeNames={"#p": partition},
            ExpressionAttributeValues={":p": {"S": layout.tenant_partition(tenant_id)}},
        )
        statuses = []
        for entry in answer["Items"]:
            job = await clients.dynamodb.get_item(
                TableName=table,
                Key={"pk": entry["pk"], "sk": {"S": layout.JOB_SK}},
                ConsistentRead=True,
            )
            statuses.append(job["Item"]["status"]["S"])
    return sorted(statuses)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_command_of_the_tutorial_runs_on_aws(tmp_path: Path, aws_env: dict[str, str]) -> None:
    """The same tour, every process's environment pointing at a fresh ``aws://NAME`` on
    the emulator, with every documented outcome checked as on SQLite.

    An operator on AWS runs ``ferryman migrate`` once before anything serves (the engine
    creates nothing: serve, api and worker refuse a missing table or queue), so this
    test does it before the first step. The queue is made for the ``max_receives`` the
    tour's ferryman.toml sets in step 6: SQS counts deliveries itself, by the redrive
    policy's ``maxReceiveCount`` that ``migrate`` writes once, so an operator makes the
    queue for the count their workers run with (step 6's ``ferryman doctor`` checks that
    the two agree, and step 7's seventh receive is SQS's redrive to the dead-letter
    queue). Steps 2 to 5 run with the default (10) against it: none of their jobs is
    delivered twice without an outcome, so the count does not come into them.
    """
    from aws_emulator import fresh_name

    steps = parse_tutorial(TUTORIAL.read_text())
    database_url = f"aws://{fresh_name('tour')}"
    engine_env = {**aws_env, "FERRYMAN_DATABASE_URL": database_url}
    migrate_env = {
        **_readers_environment(),
        **engine_env,
        "FERRYMAN_MAX_RECEIVES": _tour_setting(steps, "max_receives"),
    }
    migrated = subprocess.run(
        ["ferryman", "migrate"],
        env=migrate_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEFAULT_TIMEOUT_SECONDS,
        check=False,
    )
    output = migrated.stdout + migrated.stderr
    assert migrated.returncode == 0, output
    assert first_missing_line(["created the table", "created the queue"], output) is None, output

    workdir = _follow(tmp_path, steps, pause_before_worker_seconds=0.0, engine_env=engine_env)

    # Everything lived on AWS: nothing was kept in the tour's directory, and the table
    # holds the tenant's five jobs (hi, flaky, refused, crash, loop), each ending
    # SUCCEEDED as the tour showed, the refused and looping ones after their replays.
    assert sorted(path.name for path in workdir.iterdir()) == ["ferryman.toml"]
    assert asyncio.run(_tenant_job_statuses(database_url, "me")) == ["SUCCEEDED"] * 5
