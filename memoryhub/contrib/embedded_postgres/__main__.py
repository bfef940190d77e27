"""``python -m memoryhub.contrib.embedded_postgres status|start|stop [DATA_DIR]``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .server import get_server, is_running, socket_dir, stop


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"status", "start", "stop"}:
        print(__doc__)
        return 2
    # The runnable site's default (config.settings.DATA_DIR), from where make runs.
    default = Path(os.environ.get("MEMORYHUB_DATA_DIR") or ".memoryhub") / "postgres"
    data_dir = Path(argv[1]) if len(argv) > 1 else default
    if argv[0] == "stop":
        print("stopped" if stop(data_dir) else "not running")
        return 0
    if argv[0] == "status" and not is_running(data_dir):
        print(f"not running (data {data_dir})")
        return 3
    server = get_server(data_dir, keep_running=True)
    print(f"running: pid {server.get_pid()}, socket {socket_dir(server)}, data {data_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
