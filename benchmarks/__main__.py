"""``python -m benchmarks [--scale small|medium|large]``: run and rewrite REPORT.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    from benchmarks.run import SCALES
    from benchmarks.run import main as run

    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="the last run's database and ingest figures: run the phases after ingest again",
    )
    args = parser.parse_args()
    results = run(args.scale, args.output, reuse=args.reuse)
    from benchmarks.report import summary_table

    print(summary_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
