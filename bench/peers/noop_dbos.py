"""DBOS's side of the peers benchmark: a no-op workflow on one queue, PostgreSQL system DB.

``python noop_dbos.py`` launches a DBOS worker process that dequeues and runs the
workflow until it is terminated; producers enqueue through ``DBOSClient`` by the
workflow's name. Each workflow's ``updated_at`` in DBOS's own table is its completion time.
"""

from __future__ import annotations

import os
import signal
import threading

from dbos import DBOS, DBOSConfig

QUEUE = "bench"
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/bench")
# How often the worker looks for queued workflows (DBOS's default is 1 s, which would
# cap a burst at one dequeue a second); ferryman's own worker polls every 50 ms.
POLLING_INTERVAL_SECONDS = float(os.environ.get("BENCH_DBOS_POLLING_SECONDS", "0.05"))


@DBOS.workflow(name="noop")
def noop() -> None:
    return None


def main() -> None:
    config: DBOSConfig = {
        "name": "ferryman-bench",
        "system_database_url": DATABASE_URL,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue(QUEUE, polling_interval_sec=POLLING_INTERVAL_SECONDS)
    print("ready", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
