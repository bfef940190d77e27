"""``python -m benchmarks.quality [--locomo PATH] [--embedders hashing,minilm]``: retrieval
quality on conversations.

Each conversation of each set (:mod:`benchmarks.conversations`: the known items, the
generated and the timeline sets, LoCoMo when ``--locomo`` points at a copy; ``--sets``
picks) is written through the write service one record per turn (``"<speaker>:
<text>"``, kind ``episodic``, the turn's id as key, its session in
``metadata["session"]``, one namespace per conversation), indexed, and every
question is asked in its conversation's namespace in the three modes. Reported: evidence
recall@5 and @10 (the share of a question's evidence turns in the first k) per mode, per
embedder, per question category, with two baselines computed in the same run over the
same texts: exact cosine (numpy, the embedder's vectors) and BM25 (rank-bm25, Okapi).

A question about a moment (the timeline set's *as-of*) is asked with its ``as_of``. For a
set whose conversations list facts (the timeline), each statement of a fact is written
too, after its turns were asked, as a semantic record under the fact's key with
``supersede`` and ``valid_from`` the turn's moment, and the questions one fact answers
are asked of those records (kinds ``semantic``) as of now and as of their moment:
*fact accuracy@1*, the first hit being the statement in force. Every per-category mean
of @10 and of fact accuracy carries a 95% percentile bootstrap interval (the questions
resampled 1,000 times, a fixed seed).

A fusion study rides along: each leg's ranking (40 deep, as hybrid fetches it) is kept
per question, and the candidate fusions of :mod:`memoryhub.services.query.fusion` are
scored on it, so a fusion rule is chosen on measurements over every set and embedder;
and, against tuning to one set, the fusion best on the timeline set is scored on
LoCoMo (else on the generated set) and the other way round (``transfer``).

Writes ``benchmarks/results-quality.json`` and the "Quality" section of ``REPORT.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.conversations import (
    Conversation,
    generate,
    generate_timeline,
    known_items,
    load_locomo,
)
from benchmarks.report import replace_section

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "benchmarks" / "REPORT.md"
RESULTS = ROOT / "benchmarks" / "results-quality.json"
BEGIN, END = "<!-- quality:begin -->", "<!-- quality:end -->"
DEPTH = 40
MODES = ("vector", "keyword", "hybrid", "exact cosine", "BM25")
_WORD = re.compile(r"\w+", re.UNICODE)

MINILM = "memoryhub.embedders.sentence_transformers.SentenceTransformerEmbedder"
#: name: (embedder path, its options, other MEMORYHUB settings of the configuration).
EMBEDDERS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "hashing": ("memoryhub.embedders.HashingEmbedder", {}, {}),
    "minilm": (MINILM, {}, {}),
    # The recommended local-embeddings configuration: each turn embedded with the one
    # before it (TURN_CONTEXT).
    "minilm-turns": (MINILM, {}, {"TURN_CONTEXT": True}),
}
#: How a configuration's settings are named in the report.
SETTING_LABELS = {"TURN_CONTEXT": "turn context"}

Ranking = list[tuple[Any, float]]
#: Questions answered by one fact, asked of the keyed facts too (fact accuracy@1).
FACT_CATEGORIES = ("single-hop", "supersession-current", "as-of")
#: Bootstrap of the per-category means: resamples of the questions, its seed.
RESAMPLES, SEED = 1000, 20240
#: Weight selection: the fusion chosen on one set, reported on the other (the first pair
#: whose two sets ran, for each embedder).
TRANSFER_PAIRS = (("timeline", "LoCoMo"), ("timeline", "generated"))


def _recall(ranked: Sequence[Any], evidence: set[Any], k: int) -> float:
    return len(evidence.intersection(ranked[:k])) / len(evidence)


def bootstrap_ci(
    values: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED, level: float = 0.95
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``values``: ``resamples`` draws
    of as many values with replacement (a fixed seed: the same interval every run)."""
    import numpy as np

    data = np.asarray(values, dtype=float)
    if len(data) == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return (round(float(low), 3), round(float(high), 3))


def transfer(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Weights chosen on one set, scored on the other: per embedder, for the first of
    :data:`TRANSFER_PAIRS` whose sets both ran, both ways, the fusion of the study best on
    one set (recall@10, all questions; the first listed among equals) and what it scores
    on the other against the best there."""
    studies = {(run["embedder"], run["set"]): run["fusion_study"] for run in runs}
    found = []
    for embedder in dict.fromkeys(run["embedder"] for run in runs):
        for pair in TRANSFER_PAIRS:
            if not all((embedder, name) in studies for name in pair):
                continue
            for chosen_on, reported_on in (pair, pair[::-1]):
                source, target = studies[embedder, chosen_on], studies[embedder, reported_on]
                chosen = max(source, key=lambda f: source[f]["all"])
                best = max(target, key=lambda f: target[f]["all"])
                found.append(
                    {
                        "embedder": embedder,
                        "chosen_on": chosen_on,
                        "fusion": chosen,
                        "score_there": source[chosen]["all"],
                        "reported_on": reported_on,
                        "score": target[chosen]["all"],
                        "best": target[best]["all"],
                        "best_fusion": best,
                    }
                )
            break
    return found


def _use_embedder(name: str) -> Any:
    from django.conf import settings

    from memoryhub.conf import memoryhub_settings
    from memoryhub.services.query import clear_plans

    path, options, extra = EMBEDDERS[name]
    base = {k: v for k, v in settings.MEMORYHUB.items() if k not in SETTING_LABELS}
    settings.MEMORYHUB = {**base, "EMBEDDER": path, "EMBEDDER_OPTIONS": options, **extra}
    memoryhub_settings.reload()
    clear_plans()
    return memoryhub_settings.embedder()


def _write(scope: Any, conversation: Conversation) -> tuple[dict[str, str], float]:
    """The turns written (turn id → record id) and the seconds the write path took."""
    from memoryhub.services import write

    ids: dict[str, str] = {}
    started = time.perf_counter()
    for start in range(0, len(conversation.turns), 100):
        turns = conversation.turns[start : start + 100]
        result = write.write(
            scope,
            [
                {
                    "content": turn.content,
                    "key": turn.id,
                    "kind": "episodic",
                    "namespace": f"conv:{conversation.id}",
                    "metadata": {"session": f"s{turn.session}", "speaker": turn.speaker},
                    "occurred_at": turn.occurred_at.isoformat(),
                }
                for turn in turns
            ],
        )
        ids.update((record.key, record.id) for record in result.records)
    return ids, time.perf_counter() - started


def _index(record_ids: list[str]) -> float:
    from memoryhub.conf import memoryhub_settings
    from memoryhub.services import indexing

    batch = memoryhub_settings.INDEX_BATCH_SIZE
    started = time.perf_counter()
    for start in range(0, len(record_ids), batch):
        indexing.index_records(record_ids[start : start + batch])
    return time.perf_counter() - started


def _baselines(embedder: Any, conversation: Conversation, ids: dict[str, str]) -> dict[str, Any]:
    """Exact cosine and BM25 rankings of every question, over the same turns."""
    import numpy as np
    from rank_bm25 import BM25Okapi

    turns = conversation.turns
    record_ids = [ids[turn.id] for turn in turns]
    started = time.perf_counter()
    vectors = np.asarray(embedder.embed_documents([turn.content for turn in turns]))
    encode_seconds = time.perf_counter() - started
    bm25 = BM25Okapi([_WORD.findall(turn.content.lower()) or [""] for turn in turns])
    exact, keyword = [], []
    for question in conversation.questions:
        query = np.asarray(embedder.embed_query(question.text))
        order = np.argsort(-(vectors @ query), kind="stable")[:DEPTH]
        exact.append([record_ids[i] for i in order])
        scores = bm25.get_scores(_WORD.findall(question.text.lower()))
        keyword.append([record_ids[i] for i in np.argsort(-scores, kind="stable")[:DEPTH]])
    return {"exact cosine": exact, "BM25": keyword, "encode_seconds": encode_seconds}


def _ask(scope: Any, conversation: Conversation, k: int) -> dict[str, Any]:
    """Per question: the service's ranking in each mode, each leg 40 deep, and latency."""
    from memoryhub.services import query

    namespace = [f"conv:{conversation.id}"]
    found: dict[str, list[Any]] = defaultdict(list)
    latency: list[float] = []
    for question in conversation.questions:
        # A question about a moment ("in March 2023") reads what was said by then.
        when = {"as_of": question.as_of.isoformat()} if question.as_of else {}
        for mode in ("vector", "keyword"):
            items = query.query(
                scope, query=question.text, k=DEPTH, mode=mode, namespaces=namespace, **when
            ).items
            found[f"{mode} leg"].append([(item.id, item.score) for item in items])
            found[mode].append([item.id for item in items])
        started = time.perf_counter()
        items = query.query(
            scope, query=question.text, k=k, mode="hybrid", namespaces=namespace, **when
        ).items
        latency.append(time.perf_counter() - started)
        found["hybrid"].append([item.id for item in items])
        # Each hit with its session's previous and next turn (what the agent then reads).
        widened = query.query(
            scope,
            query=question.text,
            k=k,
            mode="hybrid",
            namespaces=namespace,
            context_turns=1,
            **when,
        ).items
        seen: list[Any] = []
        for item in widened:
            for turn in (*item.context.before, item, *item.context.after):
                if turn.id not in seen:
                    seen.append(turn.id)
        found["hybrid + context 1"].append(seen)
    return {"rankings": found, "latency": latency}


def _facts(scope: Any, conversation: Conversation) -> dict[str, list[tuple[str, float]]]:
    """The conversation's facts written as keyed semantic records, each statement
    superseding the previous one of its key from the turn's moment on (``supersede``,
    ``valid_from``), indexed; then each question answered by one fact asked of them
    (kinds ``semantic``) as of now and as of its moment (its ``as_of``, else the end of
    the conversation): for "now" and "as_of", (category, 1 if the first hit is the fact
    its evidence turn states, else 0)."""
    from memoryhub.services import query, write

    namespace = f"conv:{conversation.id}"
    turns = {turn.id: turn for turn in conversation.turns}
    records: dict[str, str] = {}
    for key, turn_id in conversation.facts:
        turn = turns[turn_id]
        moment = turn.occurred_at.isoformat()
        result = write.write(
            scope,
            [
                {
                    "content": turn.content,
                    "key": f"fact:{key}",
                    "kind": "semantic",
                    "namespace": namespace,
                    "metadata": {"fact": True, "turn": turn.id},
                    "occurred_at": moment,
                    "valid_from": moment,
                    "supersede": True,
                }
            ],
        )
        records[turn_id] = str(result.records[0].id)
    _index(list(records.values()))
    end = max(turn.occurred_at for turn in conversation.turns)
    found: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for question in conversation.questions:
        if question.category not in FACT_CATEGORIES:
            continue
        expected = records[question.evidence[0]]
        for label, moment in (("now", None), ("as_of", question.as_of or end)):
            when = {"as_of": moment.isoformat()} if moment else {}
            items = query.query(
                scope,
                query=question.text,
                k=1,
                mode="hybrid",
                namespaces=[namespace],
                kinds=["semantic"],
                **when,
            ).items
            hit = 1.0 if items and str(items[0].id) == expected else 0.0
            found[label].append((question.category, hit))
    return found


def _fusions() -> dict[str, Callable[[Ranking, Ranking], Ranking]]:
    """The candidate fusions of the study, by name."""
    from memoryhub.services.query import fusion

    candidates: dict[str, Callable[[Ranking, Ranking], Ranking]] = {}
    for ties in ("none", "mean"):
        for weight in (0.25, 0.5, 1.0):
            candidates[f"rrf {weight}:1 ties={ties}"] = lambda v, w, x=weight, t=ties: (
                fusion.weighted_rrf(v, w, x, 1.0, t)
            )
    for alpha in (0.2, 0.3, 0.4, 0.5, 0.6):
        candidates[f"minmax α={alpha}"] = lambda v, w, a=alpha: fusion.convex(v, w, a, "minmax")
        candidates[f"dbsf α={alpha}"] = lambda v, w, a=alpha: fusion.convex(v, w, a, "dbsf")
    return candidates


def evaluate(
    name: str, conversations: list[Conversation], embedder_name: str, k: int
) -> dict[str, Any]:
    from memoryhub.scope import Scope
    from memoryhub.services import knowledge_bases, word_statistics
    from tenants.models import Domain, Org

    embedder = _use_embedder(embedder_name)
    org = Org.objects.create(slug=f"q-{name}-{embedder_name}"[:60], name=name)
    domain = Domain.objects.create(org=org, slug="conversations")
    scope = Scope.for_domain(domain)
    knowledge_bases.ensure_knowledge_base(scope, "memory")
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    study: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    facts: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    fusions = _fusions()
    write_seconds = index_seconds = encode_seconds = 0.0
    latency: list[float] = []
    turns = questions = 0
    for conversation in conversations:
        ids, seconds = _write(scope, conversation)
        write_seconds += seconds
        index_seconds += _index(list(ids.values()))
        turns += len(conversation.turns)
        # What the sweeper does as the domain grows: its words counted once it is large
        # (KEYWORD_STATISTICS_MIN_RECORDS), and its keyword leg then ranks the records
        # holding a question's rarest words.
        word_statistics.refresh({(scope.org_id, scope.domain_id): turns})
        questions += len(conversation.questions)
        asked = _ask(scope, conversation, k)
        latency += asked["latency"]
        baselines = _baselines(embedder, conversation, ids)
        encode_seconds += baselines.pop("encode_seconds")
        rankings = {**asked["rankings"], **baselines}
        for n, question in enumerate(conversation.questions):
            evidence = {ids[turn] for turn in question.evidence}
            for mode in ("vector", "keyword", "hybrid", "exact cosine", "BM25"):
                for at in (5, 10):
                    value = _recall(rankings[mode][n], evidence, at)
                    scores[f"{mode}@{at}"]["all"].append(value)
                    scores[f"{mode}@{at}"][question.category].append(value)
            # Every turn read: the hits and their neighbours (up to 3 × k turns).
            widened = rankings["hybrid + context 1"][n]
            scores["context"]["all"].append(_recall(widened, evidence, len(widened)))
            scores["context"][question.category].append(_recall(widened, evidence, len(widened)))
            scores["context turns read"]["all"].append(len(widened))
            legs = rankings["vector leg"][n], rankings["keyword leg"][n]
            for fusion_name, fuse in fusions.items():
                fused = [pk for pk, _ in fuse(*legs)]
                study[fusion_name]["all"].append(_recall(fused, evidence, 10))
                study[fusion_name][question.category].append(_recall(fused, evidence, 10))
        # Written after the turns were asked: the turns' rankings never meet the facts.
        if conversation.facts:
            for label, hits in _facts(scope, conversation).items():
                for category, hit in hits:
                    facts[label]["all"].append(hit)
                    facts[label][category].append(hit)
    mean = lambda values: round(statistics.fmean(values), 3)  # noqa: E731
    ci = lambda by: {c: bootstrap_ci(v) for c, v in by.items()}  # noqa: E731
    return {
        "set": name,
        "embedder": embedder.name
        + "".join(f" + {SETTING_LABELS[k]}" for k in EMBEDDERS[embedder_name][2]),
        "turns": turns,
        "questions": questions,
        "write_turns_per_s": round(turns / write_seconds, 1),
        "index_turns_per_s": round(turns / index_seconds, 1),
        "encode_turns_per_s": round(turns / encode_seconds, 1),
        "hybrid_p50_ms": round(statistics.median(latency) * 1000, 2),
        "recall": {metric: {c: mean(v) for c, v in by.items()} for metric, by in scores.items()},
        "fusion_study": {f: {c: mean(v) for c, v in by.items()} for f, by in study.items()},
        "categories": {c: len(v) for c, v in scores["hybrid@10"].items()},
        # 95% bootstrap intervals of the means, per category (questions resampled).
        "ci": {metric: ci(by) for metric, by in scores.items() if metric.endswith("@10")},
        **(
            {
                "facts": {
                    label: {c: mean(v) for c, v in by.items()} for label, by in facts.items()
                },
                "facts_ci": {label: ci(by) for label, by in facts.items()},
                "fact_questions": {c: len(v) for c, v in facts["now"].items()},
            }
            if facts
            else {}
        ),
    }


def _interval(bounds: Sequence[float] | None) -> str:
    return f"[{bounds[0]}, {bounds[1]}]" if bounds else "–"


def section(results: dict[str, Any]) -> str:
    lines = [
        BEGIN,
        "## Quality on conversations (`python -m benchmarks.quality`)",
        "",
        f"Evidence recall@5 / @10 (the share of a question's evidence turns in the first k),"
        f" one record per turn, one namespace per conversation; baselines over the same"
        f" texts in the same run. {results['cpus']} CPUs, {results['date']}. Sets: the main"
        " harness's known items (stdlib docstrings); a generated conversational set (the"
        " recipe is benchmarks/conversations.py); LoCoMo (Maharana et al., ACL 2024; read"
        " from a local copy, not redistributed: benchmarks/DATASETS.md); a generated"
        " timeline of facts that change (`generate_timeline()`: supersessions, as-of"
        " questions, asked with their `as_of`). Fusion: each leg min-max normalised, the"
        " vector leg weighted 0.3 (hashing) or 0.4 (models). Intervals: 95% percentile"
        f" bootstrap of the mean, the questions resampled {RESAMPLES} times (seed {SEED}).",
        "",
    ]
    for run in results["runs"]:
        lines += [
            f"### {run['set']}, {run['embedder']} ({run['turns']} turns,"
            f" {run['questions']} questions)",
            "",
            "| questions | n | vector | keyword | hybrid | hybrid@10 95% CI | exact cosine | BM25 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        categories = ["all", *sorted(c for c in run["categories"] if c != "all")]
        for category in categories:
            cells = [
                f"{run['recall'][f'{mode}@5'].get(category, '–')} /"
                f" {run['recall'][f'{mode}@10'].get(category, '–')}"
                for mode in ("vector", "keyword", "hybrid", "exact cosine", "BM25")
            ]
            cells.insert(3, _interval(run.get("ci", {}).get("hybrid@10", {}).get(category)))
            lines.append(
                f"| {category} | {run['categories'][category]} | " + " | ".join(cells) + " |"
            )
        context = run["recall"]["context"]
        lines += [
            "",
            f"With `context_turns: 1` (each hit with its session's previous and next turn,"
            f" {run['recall']['context turns read']['all']} turns read on average for k ="
            f" {results['k']}): evidence recall "
            + ", ".join(f"{c} {context.get(c, '–')}" for c in categories)
            + f" (hybrid@10 alone: {run['recall']['hybrid@10']['all']}).",
        ]
        if run.get("facts"):
            facts, intervals = run["facts"], run["facts_ci"]
            lines += [
                "",
                "Keyed facts (each statement also written as a semantic record under its"
                " fact's key with `supersede`, valid from the turn's moment), the questions"
                " one fact answers asked of them (kinds `semantic`, hybrid): fact"
                " accuracy@1 as of now and as of the question's moment (its `as_of`, else"
                " the conversation's end).",
                "",
                "| questions | n | now | 95% CI | as_of | 95% CI |",
                "|---|---|---|---|---|---|",
            ]
            for category in ["all", *sorted(c for c in run["fact_questions"] if c != "all")]:
                lines.append(
                    f"| {category} | {run['fact_questions'][category]} |"
                    f" {facts['now'][category]} | {_interval(intervals['now'][category])} |"
                    f" {facts['as_of'][category]} | {_interval(intervals['as_of'][category])} |"
                )
        study = run["fusion_study"]
        best = max(study, key=lambda f: study[f]["all"])
        lines += [
            "",
            "Fusion study (recall@10, all questions): "
            + ", ".join(f"{f} {v['all']}" for f, v in study.items())
            + f"; best: {best}.",
            f"Write path {run['write_turns_per_s']} turns/s; indexing (the worker's"
            f" code, in process) {run['index_turns_per_s']} turns/s against the bare"
            f" embedder's {run['encode_turns_per_s']} turns/s over the same texts"
            f" ({run['index_turns_per_s'] / run['encode_turns_per_s']:.2f}); hybrid p50"
            f" {run['hybrid_p50_ms']} ms.",
            "",
        ]
    if results.get("transfer"):
        lines += ["### Weights chosen on one set, reported on the other", ""]
        for t in results["transfer"]:
            lines.append(
                f"* {t['embedder']}: chosen on {t['chosen_on']}: {t['fusion']}"
                f" ({t['score_there']}); on {t['reported_on']} it scores {t['score']}"
                f" (best there: {t['best']}, {t['best_fusion']})."
            )
        lines.append("")
    lines += ["### Targets", "", "| target | measured | verdict |", "|---|---|---|"]
    for run in results["runs"]:
        recall = {mode: run["recall"][f"{mode}@10"]["all"] for mode in MODES}
        label = f"{run['set']}, {run['embedder']}"
        best = max(recall["vector"], recall["keyword"])
        lines.append(
            f"| {label}: hybrid ≥ max(vector, keyword) | {recall['hybrid']} vs {best} |"
            f" {'met' if recall['hybrid'] >= best else '**not met**'} |"
        )
        # The bar for a real model on conversations (known items sit at 1.0).
        if run["embedder"].startswith("st-") and run["set"] != "known items":
            floor = round(1.2 * recall["BM25"], 3)
            lines.append(
                f"| {label}: hybrid ≥ 1.2 × BM25 | {recall['hybrid']} vs {floor} |"
                f" {'met' if recall['hybrid'] >= floor else '**not met**'} |"
            )
    lines.append(END)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality")
    parser.add_argument("--locomo", type=Path, default=os.environ.get("MEMORYHUB_LOCOMO"))
    parser.add_argument("--embedders", default="hashing,minilm,minilm-turns")
    parser.add_argument("--sets", default="known-items,generated,timeline,locomo")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--database", default="memoryhub_bench_quality")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results JSON")
    parser.add_argument("--no-report", action="store_true", help="leave REPORT.md alone")
    args = parser.parse_args(argv)

    from benchmarks.run import setup_django

    os.environ["CELERY_BROKER_URL"] = "memory://"
    setup_django(args.database)
    sets: dict[str, list[Conversation]] = {}
    wanted = args.sets.split(",")
    if "known-items" in wanted:
        sets["known items"] = known_items()
    if "generated" in wanted:
        sets["generated"] = generate()
    if "timeline" in wanted:
        sets["timeline"] = generate_timeline()
    if "locomo" in wanted and args.locomo:
        sets["LoCoMo"] = load_locomo(Path(args.locomo))
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "k": args.k,
        "runs": [],
    }
    for embedder_name in args.embedders.split(","):
        for name, conversations in sets.items():
            if name == "known items" and EMBEDDERS[embedder_name][2]:
                continue  # passages are no conversation: a turn setting says nothing there
            run = evaluate(name, conversations, embedder_name, args.k)
            results["runs"].append(run)
            results["transfer"] = transfer(results["runs"])
            print(f"{name} / {run['embedder']}: hybrid@10 {run['recall']['hybrid@10']}", flush=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")
    if not args.no_report:
        replace_section(REPORT, BEGIN, END, section(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
