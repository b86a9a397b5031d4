"""Your own tasks end to end: a module named by FERRYMAN_TASKS, a [tasks.NAME] table and a
tasks_dir file, each built by wiring from real settings, served by the real app, run by a
worker on the sim to SUCCEEDED; GET /v1/tasks and the OpenAPI document describe them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from ferryman.cli.serving import app_deps
from ferryman.config import ConfigurationError, load_settings
from ferryman.http.app import create_app
from ferryman.wiring import build_tasks, open_runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from ferryman.wiring import Runtime

    from .conftest import HttpStack, ProblemCheck

MODULE_NAME = "acme_e2e_tasks"
MODULE = textwrap.dedent(
    '''
    """Tasks of a team that never touches ferryman's code."""
    from __future__ import annotations

    from typing import Literal

    from pydantic import Field

    from ferryman.tasks import PromptParts, TaskInput, TaskOutput, task


    class TriageIn(TaskInput):
        email: str = Field(min_length=1, max_length=5000)
        customer: str | None = Field(default=None, max_length=100)


    class TriageOut(TaskOutput):
        queue: Literal["sales", "support", "billing"]
        reason: str = Field(min_length=1, max_length=300)


    @task(output=TriageOut, max_attempts=3, max_invalid_output_attempts=1, max_tokens=400, temperature=0)
    def triage(given: TriageIn) -> PromptParts:
        """Route a customer email to a queue."""
        who = f" from {given.customer}" if given.customer else ""
        return PromptParts(system="You route customer emails.", prompt=f"Email{who}:\\n{given.email}")
    '''
)
TOML = textwrap.dedent(
    """
    [tasks.sentiment]
    description = "The sentiment of a review."
    system = "You rate reviews of {{ input.product }}."
    prompt = "Rate this review:\\n{{ input.review }}"
    max_tokens = 50
    temperature = 0.2
    input_schema = { type = "object", required = ["review"], properties = { review = { type = "string", minLength = 1, maxLength = 4000 }, product = { type = "string", maxLength = 100 } } }

    [tasks.sentiment.output_schema]
    type = "object"
    required = ["label", "score"]
    additionalProperties = false
    properties = { label = { enum = ["positive", "neutral", "negative"] }, score = { type = "number", minimum = -1, maximum = 1 } }
    """
)
DIR_TASK = textwrap.dedent(
    """
    prompt = "Translate to {{ input.language }}: {{ input.text }}"
    input_schema = { type = "object", required = ["text", "language"], properties = { text = { type = "string", maxLength = 1000 }, language = { enum = ["fr", "de"] } } }
    output_schema = { type = "object", required = ["translation"], properties = { translation = { type = "string", minLength = 1 } } }
    """
)
PERSON = {
    "type": "object",
    "required": ["name", "age"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "maxLength": 80},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "roles": {"type": "array", "items": {"$ref": "#/$defs/Role"}, "minItems": 1, "maxItems": 3},
    },
    "$defs": {"Role": {"enum": ["admin", "user"]}},
}


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with ferryman.toml, tasks/translate.toml and a task module on
    the path, configured only through FERRYMAN_* variables, as an operator would."""
    for name in list(os.environ):
        if name.startswith("FERRYMAN_"):
            monkeypatch.delenv(name)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / f"{MODULE_NAME}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    monkeypatch.delitem(sys.modules, MODULE_NAME, raising=False)
    (tmp_path / "ferryman.toml").write_text(TOML)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "translate.toml").write_text(DIR_TASK)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FERRYMAN_TASKS", MODULE_NAME)
    monkeypatch.setenv("FERRYMAN_TASKS_DIR", "tasks")
    monkeypatch.setenv("FERRYMAN_DATABASE_URL", f"sqlite:///{tmp_path}/ferryman.db")
    monkeypatch.setenv("FERRYMAN_RESULTS_URL", "db")
    monkeypatch.setenv("FERRYMAN_TENANT_RATE_PER_SECOND", "0")
    monkeypatch.setenv("FERRYMAN_TENANT_READ_RATE_PER_SECOND", "0")
    monkeypatch.setenv("FERRYMAN_SIM_SCRIPTS", "true")  # some tests script the sim model
    return tmp_path


@dataclass
class Served:
    runtime: Runtime
    client: httpx.AsyncClient

    async def submit(self, task: str, job_input: dict[str, Any]) -> httpx.Response:
        return await self.client.post("/v1/generations", json={"task": task, "input": job_input})

    async def finish(self, job_id: str) -> dict[str, Any]:
        await self.runtime.new_worker().run_until_idle()
        response = await self.client.get(f"/v1/generations/{job_id}")
        assert response.status_code == 200
        job: dict[str, Any] = response.json()
        return job


@asynccontextmanager
async def served() -> AsyncIterator[Served]:
    async with open_runtime(load_settings()) as runtime:
        key = await runtime.api_keys.create("acme")
        app = create_app(app_deps(runtime))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://test",
            headers={"Authorization": f"Bearer {key}"},
        ) as client:
            yield Served(runtime, client)


def locs(response: httpx.Response) -> list[list[Any]]:
    return [error["loc"] for error in response.json()["errors"]]


@pytest.mark.usefixtures("deployment")
async def test_a_module_task_and_declared_tasks_run_to_succeeded() -> None:
    async with served() as s:
        assert {"triage", "sentiment", "translate"} <= set(s.runtime.tasks.names())
        jobs = {
            "triage": {"email": "I was charged twice", "customer": "Ann"},
            "sentiment": {"review": "Lovely kettle, boils fast", "product": "kettles"},
            "translate": {"text": "good morning", "language": "fr"},
        }
        ids = {}
        for task, job_input in jobs.items():
            response = await s.submit(task, job_input)
            assert response.status_code == 202, response.text
            ids[task] = response.json()["job_id"]
        results = {task: await s.finish(job_id) for task, job_id in ids.items()}
    for task, job in results.items():
        assert job["status"] == "SUCCEEDED", (task, job["error"])
        assert job["task"] == task
        assert job["model"] == "sim"
    assert results["triage"]["result"]["queue"] in ("sales", "support", "billing")
    assert results["sentiment"]["result"]["label"] in ("positive", "neutral", "negative")
    assert -1 <= results["sentiment"]["result"]["score"] <= 1
    assert results["translate"]["result"]["translation"]


@pytest.mark.usefixtures("deployment")
async def test_the_extract_task_runs_with_the_jobs_own_schema() -> None:
    async with served() as s:
        response = await s.submit("extract", {"text": "Bob (42) is an admin.", "schema": PERSON})
        assert response.status_code == 202, response.text
        job = await s.finish(response.json()["job_id"])
    assert job["status"] == "SUCCEEDED", job["error"]
    assert not list(Draft202012Validator(PERSON).iter_errors(job["result"]))


@pytest.mark.usefixtures("deployment")
async def test_an_extract_answer_breaking_the_jobs_schema_is_invalid_output() -> None:
    async with served() as s:
        scripted = {"script": ["invalid_schema"]}
        response = await s.submit("extract", {"text": "t", "schema": PERSON, "simulate": scripted})
        job = await s.finish(response.json()["job_id"])
    # The first attempt broke the schema: a retry is scheduled (or the budget is spent).
    assert job["status"] in ("RETRY_SCHEDULED", "FAILED")
    assert job["error"]["class"] == "INVALID_OUTPUT"


@pytest.mark.usefixtures("deployment")
async def test_a_declared_tasks_answer_breaking_its_schema_is_invalid_output() -> None:
    async with served() as s:
        response = await s.submit(
            "sentiment", {"review": "meh", "simulate": {"script": ["invalid_schema"]}}
        )
        job = await s.finish(response.json()["job_id"])
    assert job["status"] in ("RETRY_SCHEDULED", "FAILED")
    assert job["error"]["class"] == "INVALID_OUTPUT"
    assert "label: Field required" in job["error"]["message"]


@pytest.mark.parametrize(
    ("task", "job_input", "expected"),
    [
        ("triage", {}, [["body", "input", "email"]]),
        ("triage", {"email": "x" * 5001}, [["body", "input", "email"]]),
        ("triage", {"email": "x", "cc": "y"}, [["body", "input", "cc"]]),
        ("sentiment", {"review": ""}, [["body", "input", "review"]]),
        ("sentiment", {"review": "ok", "product": 7}, [["body", "input", "product"]]),
        ("sentiment", {"review": "ok", "stars": 5}, [["body", "input", "stars"]]),
        ("translate", {"text": "hi", "language": "xx"}, [["body", "input", "language"]]),
        (
            "sentiment",
            {"review": "ok", "simulate": {"script": ["oops"]}},
            [["body", "input", "simulate", "script", 0]],
        ),
        ("extract", {"text": "t", "schema": {"type": "nope"}}, [["body", "input", "schema"]]),
        ("extract", {"text": "t"}, [["body", "input", "schema"]]),
    ],
)
@pytest.mark.usefixtures("deployment")
async def test_invalid_input_is_a_422_at_the_exact_field_and_stores_nothing(
    task: str,
    job_input: dict[str, Any],
    expected: list[list[Any]],
    http_problem: ProblemCheck,
) -> None:
    async with served() as s:
        response = await s.submit(task, job_input)
        http_problem(response, 422, "invalid_request")
        assert locs(response) == expected
        listed = await s.client.get("/v1/generations")
    assert listed.json()["data"] == []


@pytest.mark.usefixtures("deployment")
async def test_the_tasks_are_listed_with_their_schemas_and_defaults() -> None:
    async with served() as s:
        response = await s.client.get("/v1/tasks")
        anonymous = await s.client.get("/v1/tasks", headers={"Authorization": ""})
    assert anonymous.status_code == 401
    assert response.status_code == 200
    listed = {entry["name"]: entry for entry in response.json()["data"]}
    assert list(listed) == sorted(listed)
    assert {"classify_ticket", "extract", "generate", "summarize"} <= set(listed)
    triage = listed["triage"]
    assert triage["description"] == "Route a customer email to a queue."
    assert triage["defaults"] == {
        "model": "sim",
        "max_attempts": 3,
        "max_invalid_output_attempts": 1,
        "max_tokens": 400,
        "temperature": 0,
    }
    assert triage["input_schema"]["properties"]["email"]["maxLength"] == 5000
    assert set(triage["output_schema"]["required"]) == {"queue", "reason"}
    sentiment = listed["sentiment"]
    assert sentiment["defaults"]["max_tokens"] == 50
    assert sentiment["defaults"]["max_attempts"] is None
    assert sentiment["input_schema"]["additionalProperties"] is False
    assert "simulate" in sentiment["input_schema"]["properties"]
    assert listed["extract"]["output_schema"]["type"] == "object"


@pytest.mark.usefixtures("deployment")
async def test_the_openapi_body_is_a_oneof_keyed_by_task() -> None:
    async with served() as s:
        document = (await s.client.get("/openapi.json")).json()
        names = s.runtime.tasks.names()
    body = document["paths"]["/v1/generations"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]
    components = document["components"]["schemas"]
    assert body["discriminator"]["propertyName"] == "task"
    mapping = body["discriminator"]["mapping"]
    assert sorted(mapping) == names
    assert [entry["$ref"] for entry in body["oneOf"]] == [mapping[name] for name in names]
    for name, ref in mapping.items():
        entry = components[ref.removeprefix("#/components/schemas/")]
        assert entry["properties"]["task"]["const"] == name
        assert entry["required"] == ["task", "input"]
        task_input = components[entry["properties"]["input"]["$ref"].rsplit("/", 1)[-1]]
        assert "simulate" in task_input["properties"]
    # Every reference in the document resolves inside it.
    for ref in _refs(document):
        assert ref.removeprefix("#/components/schemas/") in components, ref
    assert components["TaskInput.sentiment"]["properties"]["review"]["maxLength"] == 4000


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


async def test_the_default_app_lists_the_builtins_on_the_read_budget(
    http_stack: HttpStack, http_open_client: Any, http_keys: Any
) -> None:
    app = http_stack.app(tenant_read_rate_per_second=10.0, tenant_rate_per_second=1.0)
    response = await http_open_client(app, http_keys.acme).get("/v1/tasks")
    assert response.status_code == 200
    assert [entry["name"] for entry in response.json()["data"]] == http_stack.tasks.names()
    assert response.headers["ratelimit-policy"].startswith('"read"')


async def test_an_app_without_a_registry_has_no_task_listing(
    http_stack: HttpStack, http_open_client: Any, http_keys: Any
) -> None:
    client = http_open_client(http_stack.app(tasks=None), http_keys.acme)
    assert (await client.get("/v1/tasks")).status_code == 404


# --- startup errors ------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"FERRYMAN_TASKS": "acme_absent_module"}, "'acme_absent_module', which cannot be found"),
        ({"toml": TOML.replace("minLength = 1, maxLength = 4000", "minLength = 1")}, "review"),
        ({"toml": TOML.replace("{{ input.review }}", "{{ input.reviw }}")}, "input.reviw"),
        ({"toml": TOML.replace("{{ input.review }}", "{{ input.review ")}, "line 2 column 1"),
        (
            {
                "toml": TOML
                + '\n[tasks.triage]\nprompt = "x"\ninput_schema = { type = "object" }\noutput_schema = { type = "object" }\n'
            },
            "already registered",
        ),
        (
            {"toml": TOML.replace("max_tokens = 50", 'max_tokens = 50\nmodel = "fast"')},
            "model 'fast', which is not configured",
        ),
        ({"module": MODULE.replace("min_length=1, max_length=5000", "min_length=1")}, "email"),
        (
            {"dir_task": DIR_TASK.replace('"fr", "de"', '"fr", 3').replace("enum", "type")},
            "translate.toml",
        ),
    ],
)
def test_a_task_that_cannot_be_built_stops_the_deployment_naming_it(
    deployment: Path, change: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "FERRYMAN_TASKS" in change:
        monkeypatch.setenv("FERRYMAN_TASKS", change["FERRYMAN_TASKS"])
    if "toml" in change:
        (deployment / "ferryman.toml").write_text(change["toml"])
    if "module" in change:
        (deployment / "code" / f"{MODULE_NAME}.py").write_text(change["module"])
    if "dir_task" in change:
        (deployment / "tasks" / "translate.toml").write_text(change["dir_task"])
    with pytest.raises(ConfigurationError) as caught:
        build_tasks(load_settings())
    assert expected in str(caught.value), str(caught.value)


def test_the_module_is_found_on_pythonpath_by_a_fresh_process(deployment: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(deployment / "code")}
    probe = "from ferryman.config import load_settings; from ferryman.wiring import build_tasks; print(build_tasks(load_settings()).names())"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "'triage'" in done.stdout
    assert "'sentiment'" in done.stdout
    assert "'translate'" in done.stdout
