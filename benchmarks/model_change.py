"""``python -m benchmarks.model_change [--passages N] [--queries Q]``: recall through a
change of embedding model.

A domain of ``N`` passages (the benchmark corpus) is written and indexed with the default
``HashingEmbedder``; the operator then switches ``EMBEDDER`` to the local MiniLM model
(``SentenceTransformerEmbedder``) and re-embeds. Known-item recall@1/@10 and query p50
are measured, in vector and hybrid mode:

- ``before``: every record on the old model, the old model configured;
- ``switched``: the new model configured, nothing re-embedded yet (the records keep
  serving vector queries with their old model's vectors);
- ``half`` (per merge of the two models' rankings: ``raw`` cosines, ``rrf``, per-model
  ``normalized``): half the records re-embedded;
- ``after``: every record on the new model.

The target: recall@10 in the half-migrated state ≥ recall before the change. Writes
``benchmarks/results-model-change.json`` and the "Model change" section of ``REPORT.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.report import replace_section

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "benchmarks" / "REPORT.md"
RESULTS = ROOT / "benchmarks" / "results-model-change.json"
BEGIN, END = "<!-- model-change:begin -->", "<!-- model-change:end -->"
NEW_EMBEDDER = "memoryhub.embedders.SentenceTransformerEmbedder"
MERGES = ("raw", "rrf", "normalized", "calibrated")


def measure(scope: Any, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Known-item recall and latency per mode over ``(query, expected content)`` pairs."""
    from memoryhub.services import query
    from memoryhub.services.query import clear_plans

    clear_plans()
    figures: dict[str, Any] = {}
    for mode in ("vector", "hybrid"):
        ranks, times, strategies = [], [], set()
        for text, expected in pairs:
            started = time.perf_counter()
            result = query.query(scope, query=text, k=10, mode=mode)
            times.append(time.perf_counter() - started)
            strategies.add(result.strategy)
            contents = [item.content for item in result.items]
            ranks.append(contents.index(expected) + 1 if expected in contents else None)
        figures[mode] = {
            "recall@1": round(sum(rank == 1 for rank in ranks) / len(ranks), 3),
            "recall@10": round(sum(rank is not None for rank in ranks) / len(ranks), 3),
            "p50_ms": round(statistics.median(times) * 1000, 2),
            "strategy": sorted(strategies),
        }
    return figures


def section(results: dict[str, Any]) -> str:
    rows = [
        "| state | vector r@1 | vector r@10 | hybrid r@1 | hybrid r@10 | vector p50 | hybrid p50 |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, figures in results["states"].items():
        v, h = figures["vector"], figures["hybrid"]
        rows.append(
            f"| {label} | {v['recall@1']} | {v['recall@10']} | {h['recall@1']} |"
            f" {h['recall@10']} | {v['p50_ms']} ms | {h['p50_ms']} ms |"
        )
    return "\n".join(
        [
            BEGIN,
            "## Model change (`python -m benchmarks.model_change`)",
            "",
            f"{results['passages']} passages written and indexed with `{results['old']}`,"
            f" then `EMBEDDER` switched to `{results['new']}` and re-embedded;"
            f" {results['queries']} known-item queries, k = 10, {results['cpus']} CPUs,"
            f" {results['date']}. Re-embedding half the domain took"
            f" {results['reembed_half_seconds']} s. `half (x)` is the half-migrated state"
            " with the two models' rankings merged by `x` (`raw` cosines, `rrf` ranks,"
            " `normalized` by each model's best, `calibrated`: the old model's similarities"
            " moved onto the new one's mean and spread over the candidates); `switched` is the new model configured"
            " and nothing re-embedded yet (before this run's code the vector leg found"
            " nothing there).",
            "",
            *rows,
            "",
            f"Chosen merge: `{results['chosen_merge']}`. Target (half-migrated recall@10 ≥"
            f" before): {'met' if results['target_met'] else 'NOT met'}.",
            END,
        ]
    )


def write_report(results: dict[str, Any]) -> None:
    replace_section(REPORT, BEGIN, END, section(results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_change")
    parser.add_argument("--passages", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args(argv)

    from benchmarks.run import setup_django

    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"
    setup_django("memoryhub_bench_model_change")
    from celery import current_app
    from django.conf import settings

    from benchmarks.corpus import known_item_query, passages
    from memoryhub.conf import memoryhub_settings
    from memoryhub.models import MemoryRecord
    from memoryhub.scope import Scope
    from memoryhub.services import indexing, write
    from memoryhub.services.query import fusion
    from tenants.models import Domain, Org

    current_app.conf.task_always_eager = True
    settings.MEMORYHUB = {**settings.MEMORYHUB, "MAX_WRITE_ITEMS": 500}
    org = Org.objects.create(slug="bench", name="Bench")
    domain = Domain.objects.create(org=org, slug="support", name="Support")
    scope = Scope(org.pk, domain.pk)
    texts = passages(args.passages)
    for start in range(0, len(texts), 500):
        write.write(scope, [{"content": text} for text in texts[start : start + 500]])
        sys.stderr.write(f"\rwritten {min(start + 500, len(texts))}/{len(texts)}")
    sys.stderr.write("\n")
    rng = random.Random(7)
    chosen = rng.sample(texts, min(args.queries, len(texts)))
    pairs = [(known_item_query(text, rng), text) for text in chosen]
    old = memoryhub_settings.embedder().name
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "passages": len(texts),
        "queries": len(pairs),
        "old": old,
        "states": {},
    }
    results["states"]["before"] = measure(scope, pairs)
    settings.MEMORYHUB = {**settings.MEMORYHUB, "EMBEDDER": NEW_EMBEDDER}
    memoryhub_settings.reload()  # a plain assignment sends no setting_changed
    new = memoryhub_settings.embedder().name
    assert new != old, new
    results["new"] = new
    results["states"]["switched"] = measure(scope, pairs)
    ids = [str(pk) for pk in MemoryRecord.unscoped.values_list("pk", flat=True).order_by("pk")]
    half = set(rng.sample(ids, len(ids) // 2))
    started = time.perf_counter()
    indexing.reembed(MemoryRecord.unscoped.filter(pk__in=half))
    results["reembed_half_seconds"] = round(time.perf_counter() - started, 1)
    for how in MERGES:
        fusion.MODEL_MERGE = how
        results["states"][f"half ({how})"] = measure(scope, pairs)
    fusion.MODEL_MERGE = chosen_merge = fusion.MODEL_MERGE_DEFAULT
    indexing.reembed(MemoryRecord.unscoped.all())
    results["states"]["after"] = measure(scope, pairs)
    merges = {
        how: results["states"][f"half ({how})"]["hybrid"]["recall@10"]
        + results["states"][f"half ({how})"]["vector"]["recall@10"]
        for how in MERGES
    }
    results["chosen_merge"] = chosen_merge
    results["best_measured_merge"] = max(merges, key=lambda how: merges[how])
    best = results["states"][f"half ({fusion.MODEL_MERGE})"]
    results["target_met"] = all(
        best[mode]["recall@10"] >= results["states"]["before"][mode]["recall@10"]
        for mode in ("vector", "hybrid")
    )
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    write_report(results)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
