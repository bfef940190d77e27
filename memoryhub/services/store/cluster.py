"""Statements on a Citus cluster's shards and workers: what the services send when
``distribution.is_citus`` says the database is a coordinator (the only place memoryhub
names Citus's functions outside ``services.distribution``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg import sql

__all__ = ["local_settings", "on_each_placement", "on_each_shard"]


def on_each_shard(cursor: Any, table: str, statement: str) -> list[tuple[bool, str]]:
    """Run ``statement`` on every shard of the distributed ``table`` (``%1$s`` in it names
    the shard; Citus's ``run_command_on_shards``): each shard's success and result."""
    cursor.execute("SELECT success, result FROM run_command_on_shards(%s, %s)", [table, statement])
    return [(bool(success), str(result)) for success, result in cursor.fetchall()]


def on_each_placement(
    cursor: Any, table: str, statement: str, org_id: int
) -> list[tuple[bool, bool, str]]:
    """Run ``statement`` on every placement of the distributed ``table``'s shards (``%s``
    in it names the shard; Citus's ``run_command_on_placements``): for each, whether it
    holds org ``org_id``'s shard, its success and result."""
    cursor.execute(
        "SELECT shardid = get_shard_id_for_distribution_column(%s, %s), success, result"
        " FROM run_command_on_placements(%s, %s)",
        [table, org_id, table, statement],
    )
    return [(bool(own), bool(success), str(result)) for own, success, result in cursor.fetchall()]


def local_settings(
    connection: BaseDatabaseWrapper, settings: Sequence[tuple[str, Any]]
) -> list[str]:
    """The statements that set ``settings`` for the rest of the transaction on the
    coordinator and on the workers running its statements: ``SET LOCAL`` commands, which
    Citus sends on (``citus.propagate_set_commands``), where ``set_config()`` would set
    the coordinator's alone and a worker's HNSW scan would run on its defaults."""
    connection.ensure_connection()
    return [
        "SET LOCAL citus.propagate_set_commands = 'local'",
        *(
            sql.SQL("SET LOCAL {} = {}")
            .format(sql.Identifier(*name.split(".")), sql.Literal(str(value)))
            .as_string(connection.connection)
            for name, value in settings
        ),
    ]
