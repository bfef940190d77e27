"""Merging rankings: reciprocal-rank fusion of the legs, and the merge of two models'
vector rankings during a model change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

RRF_K = 60


def _fuse(
    vector: list[tuple[Any, float]], keyword: list[tuple[Any, float]]
) -> list[tuple[Any, float]]:
    """Reciprocal-rank fusion of two ``(id, score)`` rankings."""
    scores: dict[Any, float] = {}
    for ranking in (vector, keyword):
        for rank, (pk, _) in enumerate(ranking, start=1):
            scores[pk] = scores.get(pk, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])


def union(*rankings: list[tuple[Any, float]]) -> list[tuple[Any, float]]:
    """One ranking from rankings of the same model over parts of one scope (an HNSW
    search and the exact scan of what its index does not hold yet), best first; a record
    both found keeps its best score. Sorting also restores the order ``relaxed_order``
    iterative scans may return slightly out of."""
    best: dict[Any, float] = {}
    for ranking in rankings:
        for pk, score in ranking:
            if pk not in best or score > best[pk]:
                best[pk] = score
    return sorted(best.items(), key=lambda pair: -pair[1])


#: How the vector rankings of two models merge during a model change: "calibrated"
#: moves the previous model's similarities onto the configured model's mean and spread
#: over the candidates (the configured model's scores stay cosines); "raw" compares the
#: cosines as they are, "rrf" interleaves by rank, "normalized" divides each model's by
#: its best. Measured by ``python -m benchmarks.model_change`` (benchmarks/REPORT.md):
#: calibrated keeps recall@10 of rrf and normalized (0.99) with recall@1 near raw's.
MODEL_MERGE_DEFAULT = "calibrated"
MODEL_MERGE = MODEL_MERGE_DEFAULT


def merge_models(
    rankings: Sequence[list[tuple[Any, float]]], how: str | None = None
) -> list[tuple[Any, float]]:
    """One vector ranking from disjoint per-model rankings (a record has one vector)."""
    how = how or MODEL_MERGE
    if how == "calibrated":
        return _calibrated(rankings)
    merged: list[tuple[Any, float]] = []
    for ranking in rankings:
        if not ranking:
            continue
        if how == "rrf":
            merged.extend((pk, 1.0 / (RRF_K + rank)) for rank, (pk, _) in enumerate(ranking, 1))
        elif how == "normalized" and ranking[0][1] > 0:
            best = ranking[0][1]
            merged.extend((pk, score / best) for pk, score in ranking)
        else:
            merged.extend(ranking)
    return sorted(merged, key=lambda pair: -pair[1])


#: The candidates each model's ranking needs for a calibrated merge (a small scope's
#: few candidates say little about a model's scale: its cosines are compared as they are).
CALIBRATION_MIN = 10


def _calibrated(rankings: Sequence[list[tuple[Any, float]]]) -> list[tuple[Any, float]]:
    """Each previous model's similarities moved onto the configured model's scale (the
    first ranking): the same mean and spread over their candidates, so a record that
    stands out under its own model stands out as much under the other's. The configured
    model's scores stay its cosines; too few candidates to measure a spread
    (``CALIBRATION_MIN``): as they are."""
    import statistics

    target = rankings[0]
    merged = list(target)
    if len(target) < CALIBRATION_MIN:
        return sorted([pair for ranking in rankings for pair in ranking], key=lambda p: -p[1])
    mean, spread = statistics.fmean(s for _, s in target), statistics.pstdev(s for _, s in target)
    for ranking in rankings[1:]:
        scores = [score for _, score in ranking]
        own_spread = statistics.pstdev(scores) if len(scores) >= CALIBRATION_MIN else 0.0
        if own_spread <= 0 or spread <= 0:
            merged.extend(ranking)
            continue
        own_mean = statistics.fmean(scores)
        merged.extend(
            (pk, max(-1.0, min(1.0, mean + (score - own_mean) * spread / own_spread)))
            for pk, score in ranking
        )
    return sorted(merged, key=lambda pair: -pair[1])
