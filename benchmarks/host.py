"""How fast the host was: the same reference work, measured at the start and the end of
every run, so that runs on different machines (or on one machine whose neighbours
changed) can be read side by side.

A run's milliseconds are the product's cost times the host's speed. Runs at the same
commit on two hosts of one kind can differ severalfold even in the figures no code
touches (numpy's exact search, LangGraph's PostgresStore), so a figure without its
host's speed cannot say whether code made it better or worse. The
reference work touches nothing of memoryhub's:

* ``numpy``: the exact top 10 of a 30,050 x 384 float32 matrix (the medium run's large
  tenant; a seeded random matrix), as the latency tables' "numpy exact" row computes it:
  memory bandwidth and one core;
* ``python``: a fixed pure-Python loop (what Django, DRF and the service's Python cost
  scales with);
* ``postgres round trip``: ``SELECT 1`` on one connection (the client, the socket and
  the server's executor, no table);
* ``postgres cpu``: one statement that sums a million numbers in the server.

Each figure is the median of its repetitions, in ms.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

#: The shape of the medium run's large tenant: the "numpy exact" row's matrix.
ROWS, DIMENSIONS, K = 30_050, 384, 10
#: Repetitions of each piece of reference work.
REPEAT = {"numpy": 40, "python": 7, "postgres round trip": 300, "postgres cpu": 7}
#: The pure-Python loop's length.
PYTHON_STEPS = 1_000_000
#: What ``postgres cpu`` sums.
SERVER_NUMBERS = 1_000_000

FIGURES = tuple(REPEAT)

#: The one-minute load average above which a run refuses to start unless told to.
BUSY_LOAD = 1.0


def busy() -> str | None:
    """Why this machine is too busy to measure on (its load average), or None: another
    process sharing the CPUs slows every figure, most of all ingest."""
    import os

    load = os.getloadavg()[0]
    if load <= BUSY_LOAD:
        return None
    return (
        f"the machine is busy (load average {load:.1f} > {BUSY_LOAD}): its figures would be"
        " slow; stop the other work, or pass --busy to measure anyway"
    )


def _median_ms(work: Callable[[], Any], times: int) -> float:
    from benchmarks.run import timed

    work()  # warm: the first call pays for imports, caches and plans
    return round(statistics.median(timed(work, range(times))) * 1000, 3)


def _python_loop() -> int:
    total = 0
    for step in range(PYTHON_STEPS):
        total += step * step % 7
    return total


def measure() -> dict[str, float]:
    """The reference work's median ms, on the default database connection."""
    import numpy as np
    from django.db import connection

    rng = np.random.default_rng(19)
    matrix = rng.standard_normal((ROWS, DIMENSIONS), dtype=np.float32)
    questions = iter(rng.standard_normal((REPEAT["numpy"] + 1, DIMENSIONS), dtype=np.float32))
    figures = {
        "numpy": _median_ms(lambda: np.argsort(-(matrix @ next(questions)))[:K], REPEAT["numpy"]),
        "python": _median_ms(_python_loop, REPEAT["python"]),
    }
    with connection.cursor() as cursor:

        def statement(sql: str) -> Callable[[], Any]:
            return lambda: (cursor.execute(sql), cursor.fetchone())

        figures["postgres round trip"] = _median_ms(
            statement("SELECT 1"), REPEAT["postgres round trip"]
        )
        figures["postgres cpu"] = _median_ms(
            statement(f"SELECT sum(i) FROM generate_series(1, {SERVER_NUMBERS}) AS i"),
            REPEAT["postgres cpu"],
        )
    return figures
