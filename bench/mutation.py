"""Mutation testing: does a test fail when a rule changes?

Runs mutmut (configured in pyproject.toml, ``[tool.mutmut]``) over the pure rules
(``src/ferryman/core``), the engine adapters' pure helpers and the services'
decision points, and prints per module how many mutants the tests killed, how many
survived, and how many of the survivors are listed as equivalent in
``tests/mutation_equivalents.toml`` (a reviewed file: each entry names the function,
the original and mutated code, and why the change cannot be observed). The score is
killed / (killed + survived - equivalent); a mutant no test reaches counts as
survived, a mutant that makes the tests time out as killed.

    .venv/bin/python bench/mutation.py                  # everything, fresh; a table
    .venv/bin/python bench/mutation.py --scope core     # one scope
    .venv/bin/python bench/mutation.py --json           # one JSON object on stdout
    .venv/bin/python bench/mutation.py --rerun-survivors   # after adding tests
    .venv/bin/python bench/mutation.py --report         # only read the last run
    .venv/bin/python bench/mutation.py --scope core --sample 30 --min-score 1
                                                        # CI: a fixed sample, judged

``--sample N`` runs N mutants drawn (by ``--seed``) from the scopes' mutants instead of
all of them; ``--min-score`` makes the exit status 1 when the score is lower. CI runs
the sample (.ci/run), so a change that stops mutmut from collecting or running the
tests, or a rule change no test notices among the sampled mutants, fails CI.

A run starts from an empty ``mutants/`` directory unless ``--rerun-survivors`` or
``--report`` is given: mutmut keeps a verdict until the mutated function changes, so
a survivor stays a survivor after a test is added unless it is run again. Listed
equivalents that match no surviving mutant any more are flagged (and make the exit
status 1), so the file never keeps an entry for code that is gone or now tested.

mutmut is installed into the running interpreter's environment on first use; this
script reads mutmut's result files, so the version is pinned here.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = "mutmut==3.8.1"
EQUIVALENTS = ROOT / "tests" / "mutation_equivalents.toml"

# Which modules each scope mutates (mutmut name globs; every file must also be listed in
# [tool.mutmut] only_mutate).
SCOPES: dict[str, tuple[str, ...]] = {
    "core": ("ferryman.core.*",),
    "adapters": (
        "ferryman.adapters.sqlfile.*",
        "ferryman.adapters.sqlite.migrations.*",
        "ferryman.adapters.files.records.*",
    ),
    "services": (
        "ferryman.services.delivery.*",
        "ferryman.services.ledger.*",
        "ferryman.services.sweeper.*",
    ),
}

KILLED = {"killed", "timeout"}
# Not run yet (an interrupted run): neither killed nor survived, reported apart.
PENDING = {"not checked"}


@dataclass
class Mutant:
    name: str
    module: str
    function: str
    status: str
    original: str = ""
    mutated: str = ""
    equivalent_reason: str | None = None


@dataclass
class ModuleFigures:
    module: str
    statuses: Counter[str] = field(default_factory=Counter)
    equivalent: int = 0

    @property
    def total(self) -> int:
        return sum(n for status, n in self.statuses.items() if status not in PENDING)

    @property
    def pending(self) -> int:
        return sum(n for status, n in self.statuses.items() if status in PENDING)

    @property
    def killed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status in KILLED)

    @property
    def survived(self) -> int:
        """Not killed, equivalent ones included (no tests, suspicious: survived too)."""
        return self.total - self.killed

    @property
    def score(self) -> float | None:
        relevant = self.total - self.equivalent
        return None if relevant == 0 else self.killed / relevant

    def as_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "total": self.total,
            "killed": self.killed,
            "survived": self.survived,
            "equivalent": self.equivalent,
            "survived_not_equivalent": self.survived - self.equivalent,
            "timeout": self.statuses.get("timeout", 0),
            "no_tests": self.statuses.get("no tests", 0),
            "not_run": self.pending,
            "score": None if self.score is None else round(self.score, 4),
        }


# --- running mutmut ------------------------------------------------------------------


def ensure_mutmut() -> None:
    try:
        importlib.import_module("mutmut")
    except ImportError:
        print(f"installing {MUTMUT} into {sys.prefix}", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", MUTMUT], check=True, cwd=ROOT
        )
        importlib.invalidate_caches()


def run_mutmut(names: list[str], *, max_children: int, log: Path) -> None:
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)]
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"running mutmut on {len(names)} pattern(s); progress in {log}", file=sys.stderr)
    with log.open("w") as out:
        done = subprocess.run([*command, *names], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        sys.exit(f"mutmut run failed (exit {done.returncode}); end of {log}:\n{tail}")


def mutant_names(patterns: tuple[str, ...]) -> list[str]:
    """Every mutant mutmut would make in the scopes, computed in memory (nothing written)."""
    from mutmut.mutation.file_mutation import mutate_file_contents
    from mutmut.utils.file_utils import walk_mutatable_files
    from mutmut.utils.format_utils import get_mutant_name

    names: list[str] = []
    for path in walk_mutatable_files():
        mutated = mutate_file_contents(str(path), path.read_text(encoding="utf-8"))
        for name in mutated.mutant_names:
            key = get_mutant_name(path, name)
            if any(fnmatch.fnmatch(key, pattern) for pattern in patterns):
                names.append(key)
    return sorted(names)


# --- reading its results -------------------------------------------------------------


def load_mutants(patterns: tuple[str, ...]) -> list[Mutant]:

    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files
    from mutmut.utils.format_utils import (
        get_module_from_key,
        orig_function_and_class_names_from_key,
    )

    found: list[Mutant] = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, exit_code in data.exit_code_by_key.items():
            if not any(fnmatch.fnmatch(name, pattern) for pattern in patterns):
                continue
            module = get_module_from_key(name.partition("__mutmut_")[0])
            function, cls = orig_function_and_class_names_from_key(name)
            qualified = f"{module}.{cls}.{function}" if cls else f"{module}.{function}"
            mutant = Mutant(name, module, qualified, status_by_exit_code[exit_code])
            if mutant.status not in KILLED | PENDING:
                mutant.original, mutant.mutated = changed_lines(
                    get_diff_for_mutant(name, path=path)
                )
            found.append(mutant)
    return found


def changed_lines(diff: str) -> tuple[str, str]:
    """The removed and the added code of a diff, each as one whitespace-normalised line."""
    removed, added = [], []
    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("-"):
            removed.append(" ".join(line[1:].split()))
        elif line.startswith("+"):
            added.append(" ".join(line[1:].split()))
    return " ".join(removed), " ".join(added)


def normalise(code: str) -> str:
    return " ".join(code.split())


@dataclass
class Equivalent:
    function: str
    original: str
    mutant: str
    reason: str
    matched: int = 0


def load_equivalents(path: Path) -> list[Equivalent]:
    if not path.exists():
        return []
    entries = tomllib.loads(path.read_text(encoding="utf-8")).get("equivalent", [])
    listed = []
    for number, entry in enumerate(entries, start=1):
        missing = {"function", "original", "mutant", "reason"} - entry.keys()
        if missing or not entry["reason"].strip():
            sys.exit(f"{path}: entry {number} needs function, original, mutant and a reason")
        listed.append(
            Equivalent(
                entry["function"],
                normalise(entry["original"]),
                normalise(entry["mutant"]),
                entry["reason"].strip(),
            )
        )
    return listed


def mark_equivalents(mutants: list[Mutant], listed: list[Equivalent]) -> None:
    by_key = {(e.function, e.original, e.mutant): e for e in listed}
    for mutant in mutants:
        if mutant.status in KILLED | PENDING:
            continue
        entry = by_key.get((mutant.function, mutant.original, mutant.mutated))
        if entry is not None:
            entry.matched += 1
            mutant.equivalent_reason = entry.reason


def figures(mutants: list[Mutant]) -> list[ModuleFigures]:
    by_module: dict[str, ModuleFigures] = {}
    for mutant in mutants:
        row = by_module.setdefault(mutant.module, ModuleFigures(mutant.module))
        row.statuses[mutant.status] += 1
        row.equivalent += mutant.equivalent_reason is not None
    return [by_module[m] for m in sorted(by_module)]


def total(rows: list[ModuleFigures], name: str) -> ModuleFigures:
    summed = ModuleFigures(name)
    for row in rows:
        summed.statuses.update(row.statuses)
        summed.equivalent += row.equivalent
    return summed


# --- output ----------------------------------------------------------------------------


def scope_of(module: str) -> str:
    for scope, patterns in SCOPES.items():
        if any(f"{module}.".startswith(pattern.removesuffix("*")) for pattern in patterns):
            return scope
    return "other"


def print_table(rows: list[ModuleFigures], scopes: list[str]) -> None:
    header = (
        f"{'module':44} {'total':>6} {'killed':>7} {'survived':>9} {'equiv':>6} {'score':>7}"
        f" {'not run':>8}"
    )
    print(header)
    print("-" * len(header))
    for scope in scopes:
        in_scope = [r for r in rows if scope_of(r.module) == scope]
        for row in in_scope:
            print(line(row))
        print(line(total(in_scope, f"= {scope}")))
        print()


def line(row: ModuleFigures) -> str:
    score = "-" if row.score is None else f"{100 * row.score:.1f}%"
    return (
        f"{row.module:44} {row.total:>6} {row.killed:>7} {row.survived:>9} "
        f"{row.equivalent:>6} {score:>7} {row.pending or '':>8}"
    )


def surviving(mutant: Mutant) -> bool:
    return mutant.status not in KILLED | PENDING and mutant.equivalent_reason is None


def print_survivors(mutants: list[Mutant]) -> None:
    left = [m for m in mutants if surviving(m)]
    if not left:
        return
    print(f"{len(left)} surviving mutant(s) not listed as equivalent (mutmut show NAME):")
    for mutant in left:
        print(f"  {mutant.name}  [{mutant.status}]")
        print(f"      - {mutant.original}")
        print(f"      + {mutant.mutated}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scope", choices=list(SCOPES), action="append")
    parser.add_argument("--json", action="store_true", help="print one JSON object, nothing else")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--equivalents", type=Path, default=EQUIVALENTS)
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--report", action="store_true", help="read the last run, run nothing")
    how.add_argument(
        "--rerun-survivors",
        action="store_true",
        help="run again only the mutants the last run did not kill (after adding tests)",
    )
    how.add_argument(
        "--sample", type=int, metavar="N", help="run N mutants drawn from the scopes, not all"
    )
    parser.add_argument("--seed", type=int, default=18, help="which sample --sample draws")
    parser.add_argument(
        "--min-score", type=float, metavar="S", help="exit 1 when the score (0 to 1) is below S"
    )
    args = parser.parse_args()
    if args.sample is not None and args.sample < 1:
        parser.error("--sample must be at least 1")
    if args.min_score is not None and not 0 <= args.min_score <= 1:
        parser.error("--min-score is a fraction from 0 to 1")
    # Read after main() moves to the checkout: a relative path means the caller's.
    args.equivalents = args.equivalents.resolve()
    return args


def run(args: argparse.Namespace, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Run what the arguments ask for; the patterns of the mutants to report on."""
    log = ROOT / "mutants" / "mutmut-run.log"
    if args.report:
        return patterns
    if args.rerun_survivors:
        again = [m.name for m in load_mutants(patterns) if m.status not in KILLED]
        if again:
            run_mutmut(again, max_children=args.max_children, log=log)
        return patterns
    shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    if args.sample is None:
        run_mutmut(list(patterns), max_children=args.max_children, log=log)
        return patterns
    every = mutant_names(patterns)
    sampled = sorted(random.Random(args.seed).sample(every, min(args.sample, len(every))))
    print(f"sampled {len(sampled)} of {len(every)} mutants (seed {args.seed})", file=sys.stderr)
    run_mutmut(sampled, max_children=args.max_children, log=log)
    return tuple(sampled)


def stale_entries(listed: list[Equivalent], mutants: list[Mutant]) -> list[Equivalent]:
    """Entries for a measured module that match no survivor: the code changed, or a test
    now kills the mutant. Entries for modules not measured this time, or measured only
    in part (an interrupted run, or a --report after a sample), are not judged."""
    measured = {m.module for m in mutants} - {m.module for m in mutants if m.status in PENDING}
    return [
        e
        for e in listed
        if e.matched == 0 and any(e.function.startswith(f"{module}.") for module in measured)
    ]


def json_report(
    args: argparse.Namespace,
    scopes: list[str],
    mutants: list[Mutant],
    listed: list[Equivalent],
    stale: list[Equivalent],
    seconds: float,
) -> dict[str, Any]:
    rows = figures(mutants)
    return {
        "mutmut": MUTMUT,
        "scopes": {
            scope: {
                **total([r for r in rows if scope_of(r.module) == scope], scope).as_dict(),
                "modules": [r.as_dict() for r in rows if scope_of(r.module) == scope],
            }
            for scope in scopes
        },
        "survivors": [
            {
                "name": m.name,
                "function": m.function,
                "status": m.status,
                "original": m.original,
                "mutant": m.mutated,
            }
            for m in mutants
            if surviving(m)
        ],
        "sample": None if args.sample is None else {"size": args.sample, "seed": args.seed},
        "min_score": args.min_score,
        "equivalents_listed": len(listed),
        "equivalents_stale": [
            {"function": e.function, "original": e.original, "mutant": e.mutant} for e in stale
        ],
        "seconds": round(seconds, 1),
    }


def main() -> None:
    args = parse_args()
    scopes: list[str] = args.scope or list(SCOPES)
    os.chdir(ROOT)
    ensure_mutmut()
    started = time.monotonic()
    patterns = run(args, tuple(p for scope in scopes for p in SCOPES[scope]))
    seconds = time.monotonic() - started

    mutants = load_mutants(patterns)
    if not mutants:
        sys.exit("no mutation results: run without --report first")
    unjudged = [m.name for m in mutants if m.status in PENDING]
    if args.sample is not None and unjudged:
        sys.exit(f"mutmut judged none of {len(unjudged)} sampled mutant(s): {unjudged[:5]}")
    listed = load_equivalents(args.equivalents)
    mark_equivalents(mutants, listed)
    # A sample holds few of a module's mutants, so it judges no entry stale.
    stale = stale_entries(listed, mutants) if args.sample is None else []
    rows = figures(mutants)
    score = total(rows, "all").score
    too_low = args.min_score is not None and score is not None and score < args.min_score

    if args.json:
        print(json.dumps(json_report(args, scopes, mutants, listed, stale, seconds)))
    else:
        print_table(rows, scopes)
        print_survivors(mutants)
        if stale:
            print(f"\n{len(stale)} listed equivalent(s) match no surviving mutant any more:")
            for entry in stale:
                print(f"  {entry.function}: {entry.original}  ->  {entry.mutant}")
        shown = args.equivalents
        if shown.is_relative_to(ROOT):
            shown = shown.relative_to(ROOT)
        print(f"\n{len(listed)} equivalents listed in {shown}")
        if not args.report:
            print(f"run took {seconds / 60:.1f} min")
        if too_low:
            print(f"score {score:.4f} is below --min-score {args.min_score}")
    sys.exit(1 if stale or too_low else 0)


if __name__ == "__main__":
    main()
