"""The benchmark harness runs end to end (a smoke test: figures are not asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db(transaction=True)
def test_benchmark_harness_smoke(tmp_path):
    import psycopg
    from django.db import connection
    from psycopg import sql

    from tests.programs import database_url, scratch_database_name

    # The harness makes its own database on the same server as the tests.
    database = scratch_database_name("bench_smoke")
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["BENCH_DATABASE_URL"] = database_url(database)
    params = connection.get_connection_params()
    admin = {k: params[k] for k in ("host", "port", "user", "password") if params.get(k)}
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "benchmarks", "--scale", "tiny", "--output", str(tmp_path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
            conn.execute(drop)
    report = (tmp_path / "REPORT.md").read_text()
    assert "## Ingest" in report
    assert "## Query latency" in report
    assert "## Targets" in report
    assert "## Mixed load" in report
    assert "## The host" in report
    results = json.loads((tmp_path / "results-tiny.json").read_text())
    assert results["records"] == 1000
    # The host's reference work, at the run's start and end, every figure a time.
    for when in ("start", "end"):
        assert set(results["host"][when]) == {
            "numpy",
            "python",
            "postgres round trip",
            "postgres cpu",
        }
        assert all(ms > 0 for ms in results["host"][when].values())
    ingest = results["ingest"]
    assert ingest["service"]["records_per_second"] > 0
    assert ingest["single_process"]["records_per_second"] > 0
    assert ingest["floors"]["bulk"]["records_per_second"] > 0
    assert ingest["floors"]["incremental"]["records_per_second"] > 0
    assert set(ingest["ratios"]) == {
        "service/bulk",
        "service/incremental",
        "single_process/bulk",
        "single_process/incremental",
    }
    # Settled: no vector left out of every index of a domain searched through HNSW.
    assert ingest["service"]["settle"]["unindexed"] == 0
    assert ingest["single_process"]["settle"]["unindexed"] == 0
    assert set(results["filtered_recall"]) == {"1%", "10%", "100%"}
    load = results["load"]
    assert load["requests"] > 0
    assert load["errors_5xx"] == 0
    assert load["cross_tenant_items"] == 0
    assert load["forgotten_items"] == 0
    # QPS at 1, 4 and 16 clients, as a burst and steadily: the steady figures count only
    # the requests finishing inside the window after the warm-up (at most as many as
    # were asked), every one answered.
    from benchmarks.run import STEADY_SECONDS, STEADY_WARM_SECONDS

    assert set(results["concurrency"]) == {"1", "4", "16"}
    for clients, row in results["concurrency"].items():
        steady = row["steady"]
        assert steady["seconds"] == STEADY_SECONDS["tiny"] - STEADY_WARM_SECONDS
        assert 0 < steady["requests"] <= steady["asked"], (clients, steady)
        assert steady["qps"] == round(steady["requests"] / steady["seconds"], 1)
        assert steady["errors"] == 0 and row["errors"] == 0
    assert "16 concurrent clients, steady: QPS" in report and "Steadily, each client" in report
    for tenant, rows in results["latency_ms"].items():
        assert {"api vector", "api hybrid", "raw sql vector", "raw sql hybrid"} <= set(rows)
        # The floors return what the service returns (same work, same plan).
        assert results["floor_overlap"][tenant]["vector"] >= 0.9
        assert results["floor_overlap"][tenant]["hybrid"] >= 0.8


def test_the_host_section_reads_the_numpy_row_of_a_tenant_of_the_reference_size():
    from benchmarks.host import FIGURES, ROWS
    from benchmarks.report import host_section as section

    host = {
        "start": dict.fromkeys(FIGURES, 1.5),
        "end": {**dict.fromkeys(FIGURES, 1.5), "numpy": 4.75},
    }
    latency = {
        "large (30%)": {"records": ROWS, "numpy exact": {"p50": 4.839}},
        "1% tenant": {"records": 1016, "numpy exact": {"p50": 0.086}},
    }
    text = "\n".join(section(host, latency))
    assert "| numpy | 1.5 | 4.75 |" in text
    assert "| postgres round trip | 1.5 | 1.5 |" in text
    assert 'large (30%) tenant\'s "numpy exact" row' in text and "4.839 ms" in text
    # A tenant of another size is not the same computation.
    assert "1% tenant" not in text and "0.086" not in text


def test_a_benchmark_refuses_a_busy_machine(monkeypatch, capsys):
    from benchmarks import citus, host

    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert "load average 1.5" in host.busy()
    assert citus.main(["--records", "10"]) == 2
    assert "--busy" in capsys.readouterr().err
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    assert host.busy() is None
