"""Where a profile's samples go: py-spy's raw (collapsed) stacks, bucketed by layer.

Each sample is charged to the first bucket (in the order below) whose pattern a frame of
its stack matches, innermost frame first, so a JSON call inside a route counts as JSON,
not as the route. Run: ``py-spy record -f raw -o out.txt ...`` then
``.venv/bin/python bench/flame_summary.py out.txt [--per-job N]``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

# (bucket, pattern on "function (file:line)"); the first whose frame is innermost wins.
BUCKETS: list[tuple[str, str]] = [
    ("sqlite (writer/reader threads)", r"sqlite3|adapters/sqlite/(writer|database)\.py"),
    ("JSON encode/decode", r"orjson|json/(encoder|decoder|__init__)\.py"),
    ("pydantic validation", r"pydantic|_model_construction|fastapi/_compat"),
    ("jsonschema (task input)", r"jsonschema|referencing|rpds"),
    ("HTTP parsing (h11/httptools)", r"h11/|httptools"),
    ("uvicorn protocol", r"uvicorn/"),
    ("FastAPI/Starlette routing, deps, middleware", r"fastapi/|starlette/"),
    ("ferryman HTTP layer", r"ferryman/http/"),
    ("ferryman intake", r"ferryman/services/intake"),
    ("ferryman worker path", r"ferryman/services/(worker|delivery|attempt|limiter|results)"),
    ("ferryman other", r"ferryman/"),
    ("logging/structlog/metrics", r"logging/|structlog|prometheus"),
    ("asyncio loop & transports", r"asyncio/|uvloop|selectors"),
]


def bucket_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        for name, pattern in BUCKETS:
            if re.search(pattern, frame):
                return name
    return "other"


def summarise(path: Path) -> tuple[Counter[str], int]:
    counts: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack_text, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        stack = stack_text.split(";")
        if stack and "idle" in stack[-1]:
            continue
        counts[bucket_of(stack)] += int(n)
        total += int(n)
    return counts, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--rate", type=float, default=200.0, help="py-spy's samples/s")
    parser.add_argument("--per-job", type=int, help="jobs in the profiled run: ms per job")
    args = parser.parse_args(argv)
    counts, total = summarise(args.profile)
    for name, n in counts.most_common():
        ms = n * 1000 / args.rate
        per_job = f"  {ms / args.per_job:6.3f} ms/job" if args.per_job else ""
        print(f"{name:45s} {100 * n / total:5.1f}%{per_job}")
    print(f"{'total (busy samples)':45s} {total}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
