"""Operations on a live cluster: a tenant moved to another worker and isolated on a shard
of its own while an agent keeps writing (nothing lost, doubled or leaked), and an erased
subject looked for on every node afterwards (tables, shards, statistics)."""

from __future__ import annotations

import logging
import re
import threading

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections

from memoryhub.models import MemoryRecord
from memoryhub.services import distribution, forget, query, vector_indexes, write
from memoryhub.services.forget import ForgetRequest, vacuum_erased_tables
from tests import cluster as citus
from tests.programs import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def node_hits(conninfo: str, pattern: re.Pattern[str]) -> list[str]:
    """Where ``pattern`` occurs on one node: every text-like column of every table the
    node stores (its shards and local tables; not the distributed tables' shells, whose
    reads would fetch every node's rows) and ``pg_stats``."""
    hits = []
    with psycopg.connect(conninfo, autocommit=True) as node:
        node.execute("SET citus.override_table_visibility = off")
        columns = node.execute(
            "SELECT c.relname, a.attname FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
            " WHERE c.relkind = 'r' AND format_type(a.atttypid, NULL) IN"
            " ('text', 'character varying', 'jsonb', 'json', 'text[]',"
            " 'character varying[]', 'tsvector')"
            " AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid)"
        ).fetchall()
        for table, column in columns:
            rows = node.execute(
                f'SELECT "{column}"::text FROM "{table}" WHERE "{column}" IS NOT NULL'
            )
            hits += [f"{table}.{column}" for (text,) in rows if pattern.search(text)]
        stats = node.execute(
            "SELECT tablename, attname, concat(most_common_vals::text, histogram_bounds::text)"
            " FROM pg_stats WHERE schemaname = 'public'"
        )
        hits += [
            f"pg_stats {table}.{column}"
            for table, column, text in stats
            if pattern.search(text or "")
        ]
    return hits


def database_name() -> str:
    return connection.settings_dict["NAME"]


class Writer(threading.Thread):
    """An agent writing one turn at a time until told to stop."""

    def __init__(self, tenant) -> None:
        super().__init__(daemon=True)
        self.tenant = tenant
        self.stop = threading.Event()
        self.written: list[str] = []
        self.errors: list[str] = []
        self.working = threading.Event()  # set once some turns are written

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                try:
                    write.write(self.tenant.scope, [{"content": f"turn {n} during the move"}])
                    self.written.append(f"turn {n} during the move")
                    if len(self.written) == 5:
                        self.working.set()
                except Exception as exc:
                    self.errors.append(repr(exc))
                    self.working.set()
                n += 1
        finally:
            connections.close_all()


def run_under_writes(tenant, operation):
    """Run ``operation()`` while an agent of ``tenant`` keeps writing; return the writer
    (its turns and errors) and what the operation returned."""
    writer = Writer(tenant)
    writer.start()
    try:
        assert writer.working.wait(timeout=60)  # the operation starts while turns are written
        outcome = operation()
    finally:
        writer.stop.set()
        writer.join(timeout=60)
    return writer, outcome


def assert_nothing_lost_or_doubled(tenant, writer) -> None:
    assert writer.errors == []
    contents = list(
        MemoryRecord.unscoped.filter(org_id=tenant.org.pk).values_list("content", flat=True)
    )
    assert len(contents) == len(set(contents))  # none doubled
    assert sorted(set(writer.written) - set(contents)) == []  # none lost
    assert len(contents) == 50 + len(writer.written)


def assert_no_leak(tenant, other_tenant) -> None:
    found = query.query(other_tenant.scope, query="note during the move", mode="keyword", k=50)
    assert [item.content for item in found.items] == ["globex's own note"]
    assert query.query(tenant.scope, query="globex", mode="keyword", k=50).items == []


@pytest.fixture
def two_orgs(tenant, other_tenant):
    write.write(tenant.scope, [{"content": f"before the move {n}"} for n in range(50)])
    write.write(other_tenant.scope, [{"content": "globex's own note"}])
    return tenant, other_tenant


def test_a_tenant_moves_to_another_worker_online_under_writes(two_orgs) -> None:
    tenant, other_tenant = two_orgs
    cluster = citus.cluster()
    before = distribution.tenant_node(connection, tenant.org.pk)
    (target,) = [node for node in cluster.worker_nodes if node.port != before.port]

    writer, moved = run_under_writes(
        tenant,
        lambda: distribution.move_tenant(connection, tenant.org.pk, target.host, target.port),
    )

    assert moved.startswith("moved")
    assert distribution.tenant_node(connection, tenant.org.pk).port == target.port
    assert_nothing_lost_or_doubled(tenant, writer)
    assert_no_leak(tenant, other_tenant)
    # The old worker keeps no copy of the moved shard group.
    old = next(node for node in cluster.worker_nodes if node.port == before.port)
    pattern = re.compile(r"before the move|during the move")
    assert node_hits(old.conninfo(database_name()), pattern) == []


def test_a_tenant_is_isolated_on_a_shard_of_its_own_under_writes(two_orgs) -> None:
    tenant, other_tenant = two_orgs
    writer, shard = run_under_writes(
        tenant, lambda: distribution.isolate_tenant(connection, tenant.org.pk)
    )

    assert distribution.tenant_node(connection, tenant.org.pk).shard == shard
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT shardminvalue = shardmaxvalue FROM pg_dist_shard WHERE shardid = %s", [shard]
        )
        assert cursor.fetchone() == (True,)
    assert distribution.isolate_tenant(connection, tenant.org.pk) == shard  # already alone
    assert_nothing_lost_or_doubled(tenant, writer)
    assert_no_leak(tenant, other_tenant)


def test_an_erased_subject_is_on_no_node(tenant, other_tenant) -> None:
    secret = "zorblax-7731"
    for n in range(30):  # one turn at a time (row by row) and then a batch (COPY)
        write.write(
            tenant.scope,
            [{"content": f"alice's code word is {secret} ({n})", "metadata": {"code": secret}}],
        )
    write.write(
        tenant.scope,
        [{"content": f"{secret} again ({n})", "metadata": {"code": secret}} for n in range(60)],
    )
    write.write(other_tenant.scope, [{"content": "bob's note"}])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    result = forget.forget(tenant.scope, ForgetRequest(all=True))
    assert result.deleted == 90
    vacuum_erased_tables()
    pattern = re.compile(secret)
    for node in citus.cluster().nodes:
        assert node_hits(node.conninfo(database_name()), pattern) == [], node.name


def test_a_move_is_refused_while_commits_are_acknowledged_before_they_are_flushed(
    two_orgs,
) -> None:
    tenant, _ = two_orgs
    cluster = citus.cluster()
    before = distribution.tenant_node(connection, tenant.org.pk)
    (target,) = [node for node in cluster.worker_nodes if node.port != before.port]
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = off")
    try:
        with pytest.raises(distribution.MoveRefused, match="synchronous_commit is off"):
            distribution.move_tenant(connection, tenant.org.pk, target.host, target.port)
        with pytest.raises(distribution.MoveRefused, match="synchronous_commit is off"):
            distribution.isolate_tenant(connection, tenant.org.pk)
        with pytest.raises(CommandError, match="synchronous_commit is off"):
            call_command("memoryhub_citus", "move", "acme", "--to", f"{target.host}:{target.port}")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET synchronous_commit")
    assert distribution.tenant_node(connection, tenant.org.pk) == before  # nothing changed
    assert distribution.unflushed_commit_nodes(connection) == []


def test_a_copy_is_verified_row_by_row_against_its_old_placement(two_orgs) -> None:
    tenant, _ = two_orgs
    records = MemoryRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.shardid, p.nodename, p.nodeport, shard_name(%s::regclass, p.shardid)"
            " FROM pg_dist_shard_placement p JOIN pg_dist_shard s USING (shardid)"
            " WHERE s.logicalrelid = %s::regclass ORDER BY"
            " p.shardid = get_shard_id_for_distribution_column(%s, %s) DESC, p.shardid",
            [records, records, records, tenant.org.pk],
        )
        placements = cursor.fetchall()
    (_, host, port, name), (_, other_host, other_port, other_name) = placements[:2]
    own = {records: (host, port, name)}
    elsewhere = {records: (other_host, other_port, other_name)}

    assert distribution.verify_copy(connection, own, own) == {}
    # Another shard lacks every row of this org's: all 50 are reported missing.
    assert distribution.verify_copy(connection, own, elsewhere, org_id=tenant.org.pk) == {
        records: 50
    }


def test_a_move_waits_for_a_running_index_maintenance_which_skips_while_shards_move(
    two_orgs, caplog
) -> None:
    """The index maintenance task deadlocked with moves, or found a shard's relation
    gone: the two take turns on one advisory lock of the coordinator's."""
    caplog.set_level(logging.INFO, logger="memoryhub.services.distribution")
    tenant, other_tenant = two_orgs
    cluster = citus.cluster()
    before = distribution.tenant_node(connection, tenant.org.pk)
    (target,) = [node for node in cluster.worker_nodes if node.port != before.port]
    outcome: list[str] = []

    def move() -> None:
        try:
            outcome.append(
                distribution.move_tenant(connection, tenant.org.pk, target.host, target.port)
            )
        finally:
            connections.close_all()

    def move_waits() -> bool:
        return "waiting for the index maintenance run to finish" in caplog.text

    # A maintenance run of another process holds the lock (as it does while it builds).
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"],
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
        autocommit=True,
    ) as maintenance:
        maintenance.execute("SELECT pg_advisory_lock(hashtext(%s))", [distribution.LAYOUT_LOCK])
        mover = threading.Thread(target=move, daemon=True)
        mover.start()
        wait_for(move_waits, timeout=30, what="the move to wait for the maintenance run")
        # It waits without holding a snapshot (a waiting statement would keep one, which
        # the build would wait for in turn): no statement of it is waiting on a lock.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event = 'advisory' AND datname = current_database()"
            )
            assert cursor.fetchone()[0] == 0
        assert outcome == []
        assert distribution.tenant_node(connection, tenant.org.pk) == before
        # Meanwhile this process's maintenance run skips.
        assert vector_indexes.ensure_tenant_indexes(min_records=1).busy
        maintenance.execute("SELECT pg_advisory_unlock(hashtext(%s))", [distribution.LAYOUT_LOCK])
        mover.join(timeout=120)

    assert outcome and outcome[0].startswith("moved")
    assert distribution.tenant_node(connection, tenant.org.pk).port == target.port
    # Once moved, a maintenance run runs, and gives the tenant its own index.
    changes = vector_indexes.ensure_tenant_indexes(min_records=1)
    assert not changes.busy
    assert_no_leak(tenant, other_tenant)
