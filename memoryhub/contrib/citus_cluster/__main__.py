"""``python -m memoryhub.contrib.citus_cluster build|up|down|status``.

    build --source TARBALL            compile Citus (cached by the tarball's checksum)
    up --source TARBALL [--dir DIR] [--workers N] [--database NAME]
                                      build, create and start the nodes, prepare the
                                      database; print its DATABASE_URL
    down [--dir DIR] [--destroy]      stop the nodes (and delete their data)
    status [--dir DIR]                the nodes, their ports and whether they answer

DIR defaults to ``.memoryhub/citus``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import Cluster, build

DEFAULT_DIR = Path(".memoryhub/citus")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m memoryhub.contrib.citus_cluster")
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build")
    build_parser.add_argument("--source", type=Path, required=True)
    up = commands.add_parser("up")
    up.add_argument("--source", type=Path, required=True)
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    up.add_argument("--workers", type=int, default=2)
    up.add_argument("--database", default="memoryhub")
    down = commands.add_parser("down")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    down.add_argument("--destroy", action="store_true")
    status = commands.add_parser("status")
    status.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    options = parser.parse_args(argv)

    if options.command == "build":
        print(build(options.source))
        return 0
    if options.command == "up":
        cluster = Cluster(options.dir, build(options.source), workers=options.workers)
        cluster.start()
        print(cluster.create_database(options.database))
        return 0
    state = Path(options.dir) / "cluster.json"
    if not state.exists():
        print(f"no cluster in {options.dir}")
        return 3
    bin_dir = Path(json.loads(state.read_text()).get("bin_dir", ""))
    cluster = Cluster(options.dir, bin_dir)
    if options.command == "down":
        cluster.destroy() if options.destroy else cluster.stop()
        return 0
    for node in cluster.nodes:
        answers = "running" if cluster.running(node) else "stopped"
        print(f"{node.name}: {node.host}:{node.port} {answers}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
