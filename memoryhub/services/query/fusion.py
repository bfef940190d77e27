"""Merging rankings: the fusion of the legs, the merge of two models' vector rankings
during a model change, and the recency boost."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

RRF_K = 60

#: How hybrid search fuses its legs: each leg's scores are normalised over its own
#: candidates ("minmax": the best maps to 1, the last to 0; equal scores stay equal),
#: then combined with the vector leg's weight (``hybrid_weight``). Chosen by
#: ``python -m benchmarks.quality`` over every set and shipped embedder against
#: equal-weight RRF, weighted RRF (with and without tied ranks) and "dbsf" (mean ± 3
#: standard deviations, clipped: it ties a leg's clear winners, and measured no better)
#: (benchmarks/REPORT.md, "Quality on conversations").
FUSION = "minmax"


def fuse(
    vector: list[tuple[Any, float]],
    keyword: list[tuple[Any, float]],
    vector_weight: float,
    depth: int = 0,
) -> list[tuple[Any, float]]:
    """Hybrid's ranking: ``vector_weight`` × the vector leg's normalised score + the
    rest × the keyword leg's, in [0, 1]. A leg that found nothing gives its weight to
    the other (a query without words, records not yet embedded): a lone leg keeps its
    order. So does a leg that filled its ``depth`` with one score (the keyword leg of a
    question whose only matching word is a name every turn of a speaker holds): its
    candidates are an arbitrary sample of equal matches, not a ranking, and fused at
    full weight they would push the other leg's best out of the first k."""
    if sampled(keyword, depth) and vector:
        keyword = []
    elif sampled(vector, depth) and keyword:
        vector = []
    if not keyword:
        vector_weight = 1.0
    elif not vector:
        vector_weight = 0.0
    return convex(vector, keyword, vector_weight, FUSION)


def sampled(ranking: list[tuple[Any, float]], depth: int) -> bool:
    """Whether ``ranking`` is a cut of equal scores: at least ``depth`` (> 1) candidates,
    the first scoring no more than the last."""
    return depth > 1 and len(ranking) >= depth and ranking[0][1] <= ranking[-1][1]


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
#: calibrated keeps the recall@10 of rrf and normalized with a recall@1 near raw's.
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


def boost_recent(
    ranked: list[tuple[Any, float]],
    occurred: Mapping[Any, datetime | None],
    half_life: float,
    now: datetime,
) -> list[tuple[Any, float]]:
    """``ranked`` re-ranked by recency: each score multiplied by ``0.5 ** (age /
    half_life)``, the age (seconds, none for a moment to come or not known) counted from
    when the record occurred. A negative score (a vector mode's cosine) moves away from
    zero by the same share, so an older record never overtakes an equal newer one."""
    boosted = []
    for pk, score in ranked:
        when = occurred.get(pk)
        age = 0.0 if when is None else max((now - when).total_seconds(), 0.0)
        decay = 0.5 ** (age / half_life)
        boosted.append((pk, score - abs(score) * (1.0 - decay)))
    return sorted(boosted, key=lambda pair: -pair[1])


#: How many of the best candidates weigh their sessions (:func:`boost_conversation`).
SESSION_POOL = 20
#: A turn's speaker when its metadata names none: a short name before a colon that
#: starts the content ("Caroline: I went to the support group").
SPEAKER_PREFIX = re.compile(r"^\s*([^\W\d_][\w .'-]{0,39}?):\s")


#: The length (characters) from which a turn gains the whole length weight.
LENGTH_FULL = 400
_LOG_LENGTH_FULL = math.log1p(LENGTH_FULL)


def speaker_of(row: Mapping[str, Any]) -> str | None:
    """A candidate's speaker: ``metadata["speaker"]``, else its content's prefix."""
    named = (row.get("metadata") or {}).get("speaker")
    if isinstance(named, str) and named.strip():
        return named.strip()
    match = SPEAKER_PREFIX.match(row.get("content") or "")
    return match.group(1).strip() if match else None


def boost_conversation(
    ranked: list[tuple[Any, float]],
    rows: Mapping[Any, Mapping[str, Any]],
    question: str,
    session_weight: float,
    speaker_weight: float,
    statement_weight: float = 0.0,
    length_weight: float = 0.0,
) -> list[tuple[Any, float]]:
    """Hybrid's ranking of conversation turns (candidates that name a session), with
    what a single turn's words miss:

    * each candidate gains ``session_weight`` × its session's share of the best
      :data:`SESSION_POOL` candidates' scores (the heaviest session's share is 1);
    * when the question names exactly one of the candidates' speakers, that speaker's
      turns gain ``speaker_weight``;
    * a turn that does not end with a question mark gains ``statement_weight`` (a turn
      that asks is rarely what answers);
    * a turn gains ``length_weight`` × ``ln(1 + characters) / ln(1 + LENGTH_FULL)``, at
      most the whole weight (a turn that says more answers more often than "haha, same").

    Scores are divided by 1 + the weights, so they stay in [0, 1]. A ranking with no
    session is unchanged.

    Measured on LoCoMo and the two generated sets, weights chosen on some and reported
    on the others (docs/benchmarks.md, "Retrieval quality")."""
    weights_in_use = (session_weight, speaker_weight, statement_weight, length_weight)
    if not ranked or all(weight <= 0 for weight in weights_in_use):
        return ranked
    sessions = {pk: _session_of(rows.get(pk) or {}) for pk, _ in ranked}
    if not any(sessions.values()):
        return ranked
    weights: dict[Any, float] = {}
    for pk, score in ranked[:SESSION_POOL]:
        if sessions[pk] is not None:
            weights[sessions[pk]] = weights.get(sessions[pk], 0.0) + max(score, 0.0)
    heaviest = max(weights.values(), default=0.0)
    speakers = {pk: speaker_of(rows.get(pk) or {}) for pk, _ in ranked if sessions[pk]}
    named = {
        speaker
        for speaker in set(speakers.values())
        if speaker and re.search(rf"(?<!\w){re.escape(speaker)}(?!\w)", question, re.IGNORECASE)
    }
    favoured = next(iter(named)) if len(named) == 1 else None
    scale = 1.0 + sum(max(weight, 0.0) for weight in weights_in_use)
    boosted = []
    for pk, score in ranked:
        session = sessions[pk]
        bonus = 0.0
        if session is not None:
            content = ((rows.get(pk) or {}).get("content") or "").rstrip()
            if heaviest > 0:
                bonus += session_weight * weights.get(session, 0.0) / heaviest
            if favoured is not None and speakers.get(pk) == favoured:
                bonus += speaker_weight
            if not content.endswith("?"):
                bonus += statement_weight
            bonus += length_weight * min(1.0, math.log1p(len(content)) / _LOG_LENGTH_FULL)
        boosted.append((pk, (score + bonus) / scale))
    return sorted(boosted, key=lambda pair: -pair[1])


def _session_of(row: Mapping[str, Any]) -> tuple[Any, ...] | None:
    session = (row.get("metadata") or {}).get("session")
    if session is None or isinstance(session, bool | dict | list):
        return None
    return (row.get("knowledge_base__name"), row.get("namespace"), str(session))


# --- candidate fusions (measured by benchmarks.quality) --------------------------------


def _ranks(ranking: list[tuple[Any, float]], ties: str) -> list[tuple[Any, float]]:
    """Each id with its rank in a best-first ranking: its position ("none"), or shared
    by equal scores: the group's first position ("min") or its mean ("mean")."""
    if ties == "none":
        return [(pk, float(rank)) for rank, (pk, _) in enumerate(ranking, start=1)]
    ranked: list[tuple[Any, float]] = []
    start = 0
    while start < len(ranking):
        end = start
        while end + 1 < len(ranking) and ranking[end + 1][1] == ranking[start][1]:
            end += 1
        rank = start + 1 if ties == "min" else (start + end) / 2 + 1
        ranked.extend((pk, rank) for pk, _ in ranking[start : end + 1])
        start = end + 1
    return ranked


def weighted_rrf(
    vector: list[tuple[Any, float]],
    keyword: list[tuple[Any, float]],
    vector_weight: float,
    keyword_weight: float,
    ties: str = "none",
) -> list[tuple[Any, float]]:
    """Reciprocal-rank fusion with a weight per leg; ``ties`` as in :func:`_ranks`."""
    scores: dict[Any, float] = {}
    for ranking, weight in ((vector, vector_weight), (keyword, keyword_weight)):
        for pk, rank in _ranks(ranking, ties):
            scores[pk] = scores.get(pk, 0.0) + weight / (RRF_K + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])


def _normalised(ranking: list[tuple[Any, float]], how: str) -> dict[Any, float]:
    if not ranking:
        return {}
    values = [score for _, score in ranking]
    if how == "dbsf":
        mean, spread = statistics.fmean(values), statistics.pstdev(values)
        low, high = mean - 3 * spread, mean + 3 * spread
    else:
        low, high = min(values), max(values)
    if high <= low:
        return {pk: 1.0 for pk, _ in ranking}
    return {pk: min(1.0, max(0.0, (score - low) / (high - low))) for pk, score in ranking}


def convex(
    vector: list[tuple[Any, float]], keyword: list[tuple[Any, float]], alpha: float, how: str
) -> list[tuple[Any, float]]:
    """``alpha`` × the vector leg's normalised score + (1 − ``alpha``) × the keyword
    leg's; ``how`` normalises: "minmax" over the leg's candidates, "dbsf" over its mean
    ± 3 standard deviations."""
    v, k = _normalised(vector, how), _normalised(keyword, how)
    fused = {
        pk: alpha * v.get(pk, 0.0) + (1 - alpha) * k.get(pk, 0.0) for pk in v.keys() | k.keys()
    }
    return sorted(fused.items(), key=lambda pair: -pair[1])
