"""Nothing under tests/ or .ci/ controls, reconfigures or installs the machine's
servers: other sessions use them at the same time. A test that needs a server to come
and go starts one of its own (tests/chaos/throwaway_postgres.py), and only CI=true lets
.ci/services install packages or start the machine's PostgreSQL (what it does outside CI
is run in tests/integration/test_ci_services.py).

This reads the files as text and runs no program: a command spelled across several
lines of a list is still caught, since each rule looks for the program's name alone
where it may not appear.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve()
# Names the programs only to put recording stubs in their place (it runs none of them).
STUBS_TEST = ROOT / "tests" / "integration" / "test_ci_services.py"
THROWAWAY = ROOT / "tests" / "chaos" / "throwaway_postgres.py"
SERVICES = ROOT / ".ci" / "services"

# (what, pattern, the only files allowed to match)
RULES: tuple[tuple[str, re.Pattern[str], frozenset[Path]], ...] = (
    ("systemd controls the machine's services", re.compile(r"(?<![-\w])systemctl\b"), frozenset()),
    (
        "init scripts control the machine's services",
        # The program named in an argument list, or run as a shell line of its own
        # (``service NAME ACTION``); any service.
        re.compile(
            r"(?m)[\"']service[\"']|invoke-rc\.d|/etc/init\.d/"
            r"|^\s*(?:sudo\s+)?service\s+[\w@.-]+\s+[\w-]+\s*(?:$|[;&|])"
        ),
        frozenset(),
    ),
    (
        "pg_ctlcluster controls the machine's clusters (.ci/services may start one, under CI)",
        re.compile(r"\bpg_ctlcluster\b"),
        frozenset({SERVICES}),
    ),
    (
        "pg_ctl is only for the throwaway server, on its own data directory",
        re.compile(r"[\"']pg_ctl[\"']|\bpg_ctl\s+-"),  # run, not named in prose
        frozenset({THROWAWAY}),
    ),
    (
        "a server's configuration is not the tests' to change",
        re.compile(r"ALTER\s+SYSTEM|pg_reload_conf|pg_hba\.conf", re.IGNORECASE),
        frozenset({SERVICES}),
    ),
    (
        "packages are installed by .ci/services under CI only",
        re.compile(r"\b(?:apt-get|apt|dnf|yum)\b[^\n]*\s-y\b|\bapt-get\s+update\b"),
        frozenset({SERVICES}),
    ),
)
# What .ci/services may do to a cluster of the machine: start one that is down, and
# reload one it has just installed; nothing else of what a cluster command can do.
CLUSTER_VERBS = frozenset({"start", "reload"})


def _scanned() -> list[Path]:
    files = [p for p in (ROOT / "tests").rglob("*") if p.is_file() and p.suffix in {".py", ".sh"}]
    files += [p for p in (ROOT / ".ci").iterdir() if p.is_file()]
    return [p.resolve() for p in files if p.resolve() not in {THIS_FILE, STUBS_TEST}]


def test_no_test_or_ci_step_controls_a_server_it_did_not_start() -> None:
    offending = []
    for path in _scanned():
        text = path.read_text(errors="replace")
        for what, pattern, allowed in RULES:
            if path in allowed:
                continue
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                offending.append(f"{path.relative_to(ROOT)}:{line}: {what}: {match.group(0)!r}")
    assert not offending, "\n".join(offending)


def test_ci_only_starts_or_reloads_the_machines_clusters() -> None:
    calls = re.findall(r"^\s*pg_ctlcluster\b(.*)$", SERVICES.read_text(), re.MULTILINE)
    assert calls, "the rule below would pass on nothing"
    for arguments in calls:
        assert _cluster_action(arguments) in CLUSTER_VERBS, arguments


def _cluster_action(arguments: str) -> str:
    """The action of a cluster command: its last argument (the options, the version and
    the cluster's name come before it), up to a shell's ``||``."""
    words = arguments.split("||")[0].split()
    return words[-1] if words else ""


def test_the_ci_installs_only_in_its_ci_branch() -> None:
    """Every install and every cluster command of .ci/services sits in the function that
    runs only under CI=true."""
    text = SERVICES.read_text()
    body = re.search(r"^ci_install_and_start_postgres\(\) \{\n(.*?)^\}", text, re.M | re.S)
    assert body is not None
    outside = text.replace(body.group(1), "")
    assert not re.search(r"^\s*(?:apt-get|pg_ctlcluster|sed -i)\b", outside, re.M)
    calls = re.findall(r"ci_install_and_start_postgres(?!\(\))", outside)
    guarded = re.findall(r'\[ "\$\{CI:-\}" = "true" \] && ci_install_and_start_postgres', outside)
    assert len(calls) == len(guarded) > 0


def _text(*words: str) -> str:
    """A line as a file might spell it, assembled here from its words: this test only
    matches text against the rules and runs none of it."""
    return " ".join(words)


# The examples ask only for a status (the rules look for the program, never for what it
# is asked), of a service, a cluster and a data directory no machine has.
VERB = "status"
SERVICE, CLUSTER, DATA = "example-db", ("99", "example"), "/nonexistent/example-data"


def test_the_rules_catch_what_they_are_for() -> None:
    spelled = {
        _text("systemctl", VERB, SERVICE): 0,
        _text("invoke-rc.d", SERVICE, VERB): 1,
        _text("service", SERVICE, VERB): 1,
        str(["service", SERVICE, VERB]): 1,
        str(["pg_ctlcluster", *CLUSTER, VERB]): 2,
        _text("pg_ctl", "-D", DATA, VERB): 3,
        str(["pg_ctl", "-D", "data", VERB]): 3,
        _text("ALTER", "SYSTEM", "SET", "max_connections", "=", "5"): 4,
        _text("apt-get", "install", "-y", "postgresql"): 5,
    }
    for text, rule in spelled.items():
        assert RULES[rule][1].search(text), text


def test_a_cluster_commands_action_is_its_last_argument() -> None:
    assert _cluster_action(_text("--skip-systemctl-redirect", *CLUSTER, "start || true")) == (
        "start"
    )
    assert _cluster_action(_text('"$(basename "$(dirname "$c")")"', "main", VERB)) == VERB
    assert _cluster_action("") == ""


def test_the_rules_leave_alone_what_is_not_theirs() -> None:
    assert not RULES[3][1].search(_text("pg_ctlcluster", *CLUSTER, "start"))
    assert not RULES[0][1].search(
        _text("pg_ctlcluster", "--skip-systemctl-redirect", *CLUSTER, "start")
    )
    # Advice in a message is not an install, and prose about a service is not a command.
    assert not RULES[5][1].search("install them (apt-get install postgresql)")
    assert not RULES[1][1].search("a suite whose service is missing fails")
    assert not RULES[1][1].search("service skips the test with its reason")
    assert not RULES[1][1].search("        service = services[name]")
