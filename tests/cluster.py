"""The test session on a Citus cluster (``MEMORYHUB_TEST_CITUS=1``, as ``make test`` runs
the core suites a second time).

The session builds Citus from the vendored source (``memoryhub.contrib.citus_cluster``:
cached outside the clone, keyed by the tarball's checksum), starts a coordinator and two
workers of its own on free ports in a temporary directory, and stops and deletes them
when it ends. Each xdist worker's test database is created on every node with the
``citus`` and ``vector`` extensions, migrated as usual, then distributed with
``manage.py memoryhub_citus distribute`` (8 shards: the tests need placements on both
workers, not 32 of them).

With no tarball and no ``CI=true``, the cluster tests skip and say why; under
``CI=true`` a missing tarball or a failed build is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

ENABLED = os.environ.get("MEMORYHUB_TEST_CITUS") == "1"
#: Where the controller's cluster is (xdist workers find it through the environment).
CLUSTER_DIR = "MEMORYHUB_TEST_CITUS_DIR"
#: Shards per distributed table in the tests.
SHARD_COUNT = 8


#: Where a vendored Citus source is looked for: a ``shared/vendor`` folder beside the
#: project or above it, and the workplace's own (``/work/shared/vendor``, beside the main
#: checkout; a CI checkout may be elsewhere).
VENDOR_DIRS = [
    *(parent / "shared" / "vendor" for parent in Path(__file__).resolve().parents[1:]),
    Path("/work/shared/vendor"),
]


def source() -> Path | None:
    """The Citus source tarball: ``$MEMORYHUB_CITUS_SOURCE``, else a vendored one
    (:data:`VENDOR_DIRS`)."""
    configured = os.environ.get("MEMORYHUB_CITUS_SOURCE")
    if configured:
        return Path(configured)
    for vendor in VENDOR_DIRS:
        found = sorted(vendor.glob("citus-*.tar.gz"))
        if found:
            return found[-1]
    return None


def binaries() -> Path | None:
    """Citus built from :func:`source`, or with no source here, a build already cached."""
    from memoryhub.contrib.citus_cluster import build, cached_builds

    tarball = source()
    if tarball is not None and tarball.exists():
        return build(tarball)
    cached = cached_builds()
    return cached[-1] if cached else None


def unavailable() -> str | None:
    """Why the cluster cannot be had here (None: it can)."""
    tarball = source()
    if tarball is not None and tarball.exists():
        return None
    from memoryhub.contrib.citus_cluster import cached_builds

    if cached_builds():
        return None
    return "no Citus source tarball (set MEMORYHUB_CITUS_SOURCE or vendor one in ../shared/vendor)"


def start(config: pytest.Config) -> None:
    """In the controller (or the only process): build and start the cluster."""
    from memoryhub.contrib.citus_cluster import Cluster

    reason = unavailable()
    if reason:
        if os.environ.get("CI") == "true":
            raise pytest.UsageError(f"MEMORYHUB_TEST_CITUS=1 under CI=true, but {reason}")
        os.environ["MEMORYHUB_TEST_CITUS_SKIP"] = reason
        return
    directory = Path(tempfile.mkdtemp(prefix="memoryhub-citus-"))
    bin_dir = binaries()
    assert bin_dir is not None
    cluster = Cluster(directory / "cluster", bin_dir, workers=2, durable=False)
    cluster.start()
    os.environ[CLUSTER_DIR] = str(directory / "cluster")
    config._memoryhub_citus = cluster


def stop(config: pytest.Config) -> None:
    cluster = getattr(config, "_memoryhub_citus", None)
    if cluster is not None:
        cluster.destroy()
        shutil.rmtree(cluster.directory.parent, ignore_errors=True)  # the session's mkdtemp


def cluster():
    import json

    from memoryhub.contrib.citus_cluster import Cluster

    directory = Path(os.environ[CLUSTER_DIR])
    bin_dir = Path(json.loads((directory / "cluster.json").read_text())["bin_dir"])
    return Cluster(directory, bin_dir, workers=2, durable=False)


def point_settings_at_cluster() -> None:
    """The default database is the cluster's coordinator (settings are edited in place,
    before any connection is made)."""
    from django.conf import settings

    node = cluster().coordinator
    database = settings.DATABASES["default"]
    database.update(
        ENGINE="memoryhub.contrib.postgresql",
        HOST=node.host,
        PORT=node.port,
        USER="postgres",
        PASSWORD="",
        NAME="memoryhub_citus",
        OPTIONS={},
    )
    database.setdefault("TEST", {})["NAME"] = "test_memoryhub_citus"
    database.pop("DATA_DIR", None)
    from django.db import connections

    # A connection object made before (of the embedded backend) is made again.
    with contextlib.suppress(AttributeError):
        del connections["default"]


def prepare_test_database() -> None:
    """Create this process's test database on every node (extensions, workers added):
    Django then finds it and migrates it (``keepdb``)."""
    from django.conf import settings

    cluster().create_database(settings.DATABASES["default"]["TEST"]["NAME"])


#: Why a test runs on one server only (``single_node``): the reasons, once.
ONE_SERVERS_PLAN = (
    "reads one server's plan (index names, SET LOCAL planner switches), which a Citus plan"
    " and its workers do not show or take"
)
OWN_INDEX_SIZES = (
    "reads an own index's sizes, which on a cluster come from the shards over connections"
    " of their own: they do not see an index a test built and did not commit"
)
SHARDS_OVER_OWN_CONNECTIONS = (
    "reads the shards over connections of their own, which do not see a test's uncommitted rows"
)
BACKWARDS = (
    "migrates the test database backwards and forwards: a distributed layout is not"
    " migrated backwards past 0018 (its keys hold the org)"
)
ONE_MESSAGE = (
    "one message per query is a single-node path; on a cluster a query is a transaction"
    " with SET LOCAL"
)


def single_node(reason: str) -> pytest.MarkDecorator:
    """A test of one server's behaviour, left out of the session on a cluster (deselected
    there, with ``reason`` in the report)."""
    return pytest.mark.single_node(reason=reason)


_setup_lock: Any = None


def hold_setup_lock() -> None:
    """Take the cluster's setup lock: one xdist worker at a time creates, migrates and
    distributes its test database (two at once made Citus drop a worker connection it
    marks essential, and every test of one process failed at setup)."""
    global _setup_lock
    import fcntl

    _setup_lock = (cluster().directory / "setup.lock").open("w")
    fcntl.flock(_setup_lock, fcntl.LOCK_EX)


def release_setup_lock() -> None:
    global _setup_lock
    import fcntl

    if _setup_lock is not None:
        fcntl.flock(_setup_lock, fcntl.LOCK_UN)
        _setup_lock.close()
        _setup_lock = None
