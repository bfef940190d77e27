"""How fast the host was: the same reference work, measured at the start and the end of
every run, so that runs on different machines (or on one machine whose neighbours
changed) can be read side by side.

A run's milliseconds are the product's cost times the host's speed. Two medium runs at
the same commit on two hosts of this project's 2-vCPU kind differed by 2-3x in every
figure that no code touched (numpy's exact search, LangGraph's PostgresStore), so a
figure without its host's speed cannot say whether code made it better or worse. The
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
import time
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


def _median_ms(work: Callable[[], Any], times: int) -> float:
    work()  # warm: the first call pays for imports, caches and plans
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        work()
        samples.append(time.perf_counter() - started)
    return round(statistics.median(samples) * 1000, 3)


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


def section(host: dict[str, dict[str, float]], latency: dict[str, Any]) -> list[str]:
    """REPORT.md's lines on the host: the reference work at the run's start and end, and
    beside it the latency tables' "numpy exact" row of a tenant the reference's size."""
    rows = [f"| {figure} | {host['start'][figure]} | {host['end'][figure]} |" for figure in FIGURES]
    lines = [
        "## The host",
        "",
        "The same reference work at the start and the end of the run (`benchmarks/host.py`;"
        f" median ms): numpy's exact top {K} over a {ROWS:,} × {DIMENSIONS} matrix, a"
        f" pure-Python loop of {PYTHON_STEPS:,} steps, `SELECT 1` on one connection, and a sum"
        f" of {SERVER_NUMBERS:,} numbers in PostgreSQL. A run's milliseconds are the product's"
        " cost times the host's speed: compare two runs' figures only after comparing these."
        " An end far from the start means the host's speed changed during the run.",
        "",
        "| reference work | start | end |",
        "|---|---|---|",
        *rows,
    ]
    for tenant, figures in latency.items():
        if figures.get("records") == ROWS and "numpy exact" in figures:
            lines += [
                "",
                f'The {tenant} tenant\'s "numpy exact" row is the same computation on the'
                f" corpus's vectors ({figures['numpy exact']['p50']} ms at the median in this"
                " run): a run from before the host was measured compares through that row.",
            ]
    return lines
