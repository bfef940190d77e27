"""Django database backend: PostgreSQL, started on demand from the embedded server."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.db.backends.postgresql import client

from ..postgresql import base
from . import server as embedded


class DatabaseClient(client.DatabaseClient):
    def runshell(self, parameters: Iterable[str]) -> None:
        self.connection.get_connection_params()  # starts the server, sets HOST
        super().runshell(parameters)


class DatabaseWrapper(base.DatabaseWrapper):
    """PostgreSQL whose server is started (or reused) at the first connection.

    ``OPTIONS["data_dir"]`` names the folder holding the server's data; it is removed
    from the options before they reach psycopg.
    """

    client_class = DatabaseClient
    _started: dict[Path, str] = {}

    def get_connection_params(self) -> dict[str, Any]:
        options = self.settings_dict.setdefault("OPTIONS", {})
        data_dir = Path(options.pop("data_dir", None) or self.settings_dict["DATA_DIR"])
        self.settings_dict["DATA_DIR"] = str(data_dir)
        if data_dir not in self._started:
            server = embedded.get_server(data_dir)
            host = embedded.socket_dir(server)
            database = self.settings_dict["NAME"]
            if database and database != "postgres" and not database.startswith("test_"):
                embedded.ensure_database(server, database)
            self._started[data_dir] = host
        self.settings_dict["HOST"] = self._started[data_dir]
        # Django fills a missing USER with "" (then libpq would use the OS user's name).
        if not self.settings_dict.get("USER"):
            self.settings_dict["USER"] = "postgres"
        return super().get_connection_params()
