"""MkDocs hook: the reference tables and the benchmark plots, generated at build time.

A page asks for a generated part with a marker line, ``<!-- generated:NAME -->``; this
hook replaces it with Markdown built from the code itself, so the reference cannot drift
from what runs:

* ``rest-api``: the OpenAPI document drf-spectacular builds from the API's views
  (in-process, as ``manage.py spectacular`` does), rendered as endpoints, parameters,
  bodies and responses; the document itself is published as ``reference/openapi.json``;
* ``mcp-tools``: ``memoryhub.mcp.tools.TOOLS``, each tool's JSON Schema as ``tools/list``
  gives it to a domain-bound key;
* ``settings``: ``memoryhub.conf.SETTINGS``, each setting's default, meaning and bounds;
* ``checks``: ``memoryhub.checks.PROBLEMS``, each system check id with its level, the
  problem it names, its message and hint;
* ``commands``: the management commands' ``--help``, as argparse prints it;
* ``error-codes``: every error code the API's code can answer with; a code missing from
  the page's hand-written table is a warning, which fails the strict build;
* ``benchmark-*``: the current figures of ``benchmarks/results-*.json``, with the plots
  this hook draws (matplotlib) into ``benchmarks/*.png`` of the site; and
  ``benchmarks/DATASETS.md`` as the page ``benchmarks/datasets.md``.

No database is needed: Django is set up with ``config.settings`` and nothing connects.
"""

from __future__ import annotations

import ast
import io
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
#: A warning of this logger is counted by mkdocs: the strict build fails on it.
log = logging.getLogger("mkdocs.hooks.generate")
MARKER = re.compile(r"^<!-- generated:([a-z-]+) -->$", re.M)
PLOTS = ("latency", "throughput", "ingest", "quality")


def _django() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()


def _cell(text: Any) -> str:
    """``text`` fit for one cell of a Markdown table."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: list[str], rows: Iterable[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# --- the REST API -------------------------------------------------------------------


def openapi_schema() -> dict[str, Any]:
    """The OpenAPI document of the runnable site, as ``/api/schema/`` serves it."""
    _django()
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(json.dumps(schema, default=str))


def _schema_anchor(name: str) -> str:
    return "schema-" + name.lower()


def _type(schema: dict[str, Any]) -> str:
    """A short type of a JSON Schema: ``string (uuid)``, ``[Item]``, ``"a" | "b"``."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_schema_anchor(name)})"
    for combinator in ("oneOf", "anyOf", "allOf"):
        if combinator in schema:
            return " or ".join(_type(part) for part in schema[combinator])
    if "enum" in schema:
        return " | ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return f"object of {_type(extra)}" if isinstance(extra, dict) and extra else "object"
    if schema.get("format"):
        kind = f"{kind} ({schema['format']})"
    if schema.get("nullable"):
        kind += " or null"
    return kind


def _bounds(schema: dict[str, Any]) -> str:
    words = {
        "minimum": "≥ {}",
        "maximum": "≤ {}",
        "minLength": "at least {} characters",
        "maxLength": "at most {} characters",
        "minItems": "at least {} items",
        "maxItems": "at most {} items",
        "default": "default `{}`",
    }
    found = []
    for key, template in words.items():
        if key in schema:
            value = schema[key]
            found.append(template.format(json.dumps(value) if key == "default" else value))
    return "; ".join(found)


def _properties_table(schema: dict[str, Any]) -> str:
    properties = schema.get("properties", {})
    if not properties:
        return f"Type: {_type(schema)}."
    required = set(schema.get("required", []))
    rows = []
    for name, field in properties.items():
        notes = [field.get("description", "")]
        if field.get("readOnly"):
            notes.append("(read-only)")
        if field.get("writeOnly"):
            notes.append("(write-only)")
        if bounds := _bounds(field):
            notes.append(f"({bounds})")
        rows.append([f"`{name}`", _type(field), "yes" if name in required else "", " ".join(notes)])
    return _table(["field", "type", "required", "description"], rows)


def _body_type(content: dict[str, Any]) -> str:
    kinds = [f"{_type(media.get('schema', {}))} (`{kind}`)" for kind, media in content.items()]
    return ", ".join(kinds)


def render_rest_api() -> str:  # noqa: C901
    schema = openapi_schema()
    out: list[str] = []
    info = schema.get("info", {})
    out.append(
        f"*{_cell(info.get('title', 'API'))} {info.get('version', '')}, OpenAPI "
        f"{schema.get('openapi', '3')}: generated from the views when this site was "
        "built. The same document: [openapi.json](openapi.json), or `/api/schema/` of a "
        "running site (Swagger UI at `/api/docs/`).*"
    )
    operations = []
    for path, methods in schema.get("paths", {}).items():
        for method, operation in methods.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                operations.append((path, method, operation))
    out.append("\n## Endpoints\n")
    out.append(
        _table(
            ["method", "path", "summary"],
            (
                [
                    method.upper(),
                    f"[`{path}`](#{_operation_anchor(method, path)})",
                    operation.get("summary")
                    or operation.get("description", "").split(". ")[0].rstrip(".") + ".",
                ]
                for path, method, operation in operations
            ),
        )
    )
    for path, method, operation in operations:
        out.append(f"\n### {method.upper()} `{path}` {{#{_operation_anchor(method, path)}}}\n")
        if operation.get("description"):
            out.append(operation["description"].strip() + "\n")
        security = operation.get("security")
        if security is not None:
            schemes = sorted({name for entry in security for name in entry}) or ["none"]
            out.append(f"Authentication: {', '.join(f'`{s}`' for s in schemes)}.\n")
        parameters = operation.get("parameters", [])
        if parameters:
            out.append("**Parameters**\n")
            out.append(
                _table(
                    ["name", "in", "type", "required", "description"],
                    (
                        [
                            f"`{p['name']}`",
                            p.get("in", ""),
                            _type(p.get("schema", {})),
                            "yes" if p.get("required") else "",
                            " ".join(
                                part
                                for part in (p.get("description", ""), _bounds(p.get("schema", {})))
                                if part
                            ),
                        ]
                        for p in parameters
                    ),
                )
                + "\n"
            )
        body = operation.get("requestBody")
        if body:
            out.append(f"**Request body**: {_body_type(body.get('content', {}))}\n")
        responses = operation.get("responses", {})
        if responses:
            out.append("**Responses**\n")
            out.append(
                _table(
                    ["status", "description", "body"],
                    (
                        [
                            status,
                            answer.get("description", ""),
                            _body_type(answer.get("content", {})) or "—",
                        ]
                        for status, answer in responses.items()
                    ),
                )
                + "\n"
            )
    components = schema.get("components", {}).get("schemas", {})
    if components:
        out.append("\n## Schemas\n")
        for name, component in components.items():
            out.append(f"### {name} {{#{_schema_anchor(name)}}}\n")
            if component.get("description"):
                out.append(component["description"].strip() + "\n")
            out.append(_properties_table(component) + "\n")
    return "\n".join(out)


def _operation_anchor(method: str, path: str) -> str:
    return method + "-" + re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


# --- MCP tools ----------------------------------------------------------------------


def render_mcp_tools() -> str:
    _django()
    from memoryhub.mcp.tools import TOOLS

    out = [
        _table(
            ["tool", "key permission (policy action)", "annotations", "description"],
            (
                [
                    f"[`{tool.name}`](#{tool.name.replace('_', '-')})",
                    f"`{tool.action.value}`",
                    ", ".join(
                        word
                        for word, on in (
                            ("read-only", tool.read_only),
                            ("destructive", tool.destructive),
                        )
                        if on
                    )
                    or "—",
                    tool.description,
                ]
                for tool in TOOLS.values()
            ),
        )
    ]
    for tool in TOOLS.values():
        schema = tool.input_schema(None)
        out.append(f"\n### `{tool.name}` {{#{tool.name.replace('_', '-')}}}\n")
        out.append(tool.description + "\n")
        out.append(f"Policy action: `{tool.action.value}`.\n")
        out.append("**Arguments**\n")
        out.append(_properties_table(schema))
    return "\n".join(out)


# --- settings -----------------------------------------------------------------------


def _written_defaults() -> dict[str, str]:
    """Each setting's default as ``SETTINGS`` in ``memoryhub/conf.py`` spells it
    (``4 * 1024 * 1024``, not 4194304)."""
    source = (ROOT / "memoryhub" / "conf.py").read_text()
    declarations = next(
        node.value
        for node in ast.parse(source).body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "SETTINGS"
    )
    assert isinstance(declarations, ast.Dict)
    written = {}
    for key, value in zip(declarations.keys, declarations.values, strict=True):
        assert isinstance(key, ast.Constant) and isinstance(value, ast.Call)
        written[str(key.value)] = ast.get_source_segment(source, value.args[0]) or ""
    return written


def render_settings() -> str:
    _django()
    from memoryhub.conf import SETTINGS

    written = _written_defaults()
    rows = []
    for name, setting in SETTINGS.items():
        default = f"`{written[name]}`"
        value = setting.default
        if isinstance(value, int) and not isinstance(value, bool) and written[name] != str(value):
            default += f" ({value:,})"
        meaning = setting.doc
        if setting.maximum is not None:
            meaning += f" An integer from {setting.minimum} to {setting.maximum:,}."
        elif setting.integer:
            meaning += f" An integer, at least {setting.minimum}."
        rows.append([f"`{name}`", default, meaning])
    return _table(["setting", "default", "meaning"], rows)


# --- management commands ------------------------------------------------------------


def render_commands() -> str:
    _django()
    from django.core.management import load_command_class

    out = []
    for app in ("tenants", "memoryhub"):
        folder = ROOT / app / "management" / "commands"
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            name = path.stem
            command = load_command_class(app, name)
            parser = command.create_parser("manage.py", name)
            usage = parser.format_help()
            # Django's own options (--settings, --traceback, ...) are the same for every
            # command: keep the usage line, the command's help and its own arguments.
            own = usage.split("  -v {0,1,2,3}, --verbosity")[0].rstrip()
            out.append(f"## `{name}`\n")
            out.append(f"*From the `{app}` app.*\n")
            out.append("```\n" + own + "\n```\n")
    return "\n".join(out)


# --- system checks ------------------------------------------------------------------


def _template(text: str) -> str:
    """A message template as the reader sees it: ``{name}`` is filled in, ``{{`` is a
    brace."""
    return text.replace("{{", "{").replace("}}", "}")


def render_checks() -> str:
    _django()
    from memoryhub.checks import PROBLEMS

    out = []
    for problem in sorted(PROBLEMS, key=lambda problem: problem.id):
        out.append(f"### `{problem.id}` {{#{problem.id.replace('.', '-').lower()}}}\n")
        out.append(f"*{problem.level.__name__}*: {problem.summary}\n")
        out.append(f"Message: `{_template(problem.message)}`\n")
        if problem.hint:
            out.append(f"Hint: `{_template(problem.hint)}`\n")
    return "\n".join(out)


# --- error codes --------------------------------------------------------------------

#: Where the REST API and the MCP endpoint get their error codes from.
ERROR_SOURCES = (
    "memoryhub/exceptions.py",
    "memoryhub/api",
    "memoryhub/mcp",
    "memoryhub/boundary.py",
    "tenants/authentication.py",
)
CODE_PATTERNS = (
    re.compile(r"\bcode\s*=\s*\"([a-z_]+)\""),
    re.compile(r"\bdefault_code\s*=\s*\"([a-z_]+)\""),
    re.compile(r"_body\(\s*\"([a-z_]+)\""),
    re.compile(r"\"code\":\s*\"([a-z_]+)\""),
)
#: The codes DRF's own exceptions give, which the API's exception handler passes on.
DRF_CODES = (
    "parse_error",
    "not_authenticated",
    "authentication_failed",
    "permission_denied",
    "not_found",
    "method_not_allowed",
    "unsupported_media_type",
    "throttled",
)


#: Strings the patterns find that are not error codes (the MCP view's log outcome).
NOT_ERROR_CODES = {"ok"}


def collect_error_codes() -> dict[str, set[str]]:
    codes: dict[str, set[str]] = {code: {"Django REST framework"} for code in DRF_CODES}
    for name in ERROR_SOURCES:
        where = ROOT / name
        paths = sorted(where.rglob("*.py")) if where.is_dir() else [where]
        for path in paths:
            if not path.exists():
                continue
            text = path.read_text()
            for pattern in CODE_PATTERNS:
                for code in set(pattern.findall(text)) - NOT_ERROR_CODES:
                    codes.setdefault(code, set()).add(str(path.relative_to(ROOT)))
    return dict(sorted(codes.items()))


def render_error_codes(markdown: str, page: Page) -> str:
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", markdown, re.M))
    codes = collect_error_codes()
    for code in sorted(set(codes) - documented):
        log.warning(
            "%s: the error code %r (%s) is not in the table of codes",
            page.file.src_uri,
            code,
            ", ".join(sorted(codes[code])),
        )
    return _table(
        ["code", "answered by"],
        (
            [f"`{code}`", ", ".join(f"`{w}`" for w in sorted(where))]
            for code, where in codes.items()
        ),
    )


# --- benchmarks ---------------------------------------------------------------------


def _results(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "benchmarks" / f"results-{name}.json").read_text())


def _day(results: dict[str, Any]) -> str:
    return datetime.fromisoformat(results["date"]).strftime("%Y-%m-%d")


def _machine(results: dict[str, Any]) -> str:
    machine = results.get("machine") or {}
    cpus = machine.get("cpus", results.get("cpus"))
    text = f"{cpus}-vCPU Linux x86-64 VM"
    if machine.get("postgres"):
        postgres = machine["postgres"].split(" on ")[0]
        text += f", {postgres}, pgvector {machine.get('pgvector')}"
    return text


def _plot_latency(plt: Any, medium: dict[str, Any], large: dict[str, Any]) -> Any:
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    layers = (("api", "through the API"), ("service", "service"), ("raw sql", "raw SQL"))
    for axis, mode in zip(axes, ("vector", "hybrid"), strict=True):
        groups = [
            (f"{scale}\n{tenant}", results["latency_ms"][tenant])
            for scale, results in (("100k", medium), ("1M", large))
            for tenant in ("large (30%)", "1% tenant")
        ]
        width = 0.26
        for offset, (layer, label) in enumerate(layers):
            values = [figures[f"{layer} {mode}"]["p50"] for _, figures in groups]
            positions = [index + (offset - 1) * width for index in range(len(groups))]
            axis.bar(positions, values, width, label=label)
        axis.set_xticks(range(len(groups)), [name for name, _ in groups], fontsize=8)
        axis.set_title(f"{mode} query, p50")
        axis.set_ylabel("ms")
        axis.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    return figure


def _plot_throughput(plt: Any, medium: dict[str, Any], large: dict[str, Any]) -> Any:
    figure, axis = plt.subplots(figsize=(6.5, 3.8))
    for scale, results in (("100k records", medium), ("1M records", large)):
        clients = sorted(results["concurrency"], key=int)
        steady = [results["concurrency"][c].get("steady", {}).get("qps") for c in clients]
        if any(value is not None for value in steady):
            axis.plot([int(c) for c in clients], steady, marker="o", label=scale)
    axis.set_xscale("log", base=2)
    axis.set_xticks([1, 4, 16], ["1", "4", "16"])
    axis.set_xlabel("concurrent clients")
    axis.set_ylabel("hybrid queries per second")
    axis.set_title("Steady throughput through the API")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return figure


def _plot_ingest(plt: Any, medium: dict[str, Any], large: dict[str, Any]) -> Any:
    figure, axis = plt.subplots(figsize=(7.5, 3.8))
    bars = []
    for scale, results in (("100k", medium), ("1M", large)):
        ingest = results["ingest"]
        bars.append((f"{scale}: memoryhub, 2 workers", ingest["service"]["records_per_second"]))
        bars.append((f"{scale}: bulk floor", ingest["floors"]["bulk"]["records_per_second"]))
    peer = medium.get("peer", {}).get("ingest")
    if peer:
        bars.append(("100k: LangGraph PostgresStore", peer["records_per_second"]))
    axis.barh([name for name, _ in bars][::-1], [value for _, value in bars][::-1])
    axis.set_xlabel("records per second, written to searchable")
    axis.set_title("Ingest")
    axis.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    return figure


def _plot_quality(plt: Any, quality: dict[str, Any]) -> Any:
    runs = [run for run in quality["runs"] if run["set"] == "LoCoMo"]
    figure, axis = plt.subplots(figsize=(7.5, 3.8))
    legs = ("vector@10", "keyword@10", "hybrid@10", "BM25@10", "context")
    labels = ("vector", "keyword", "hybrid", "BM25\nbaseline", "hybrid +\ncontext_turns 1")
    names = {
        "turn context": "all-MiniLM-L6-v2 + turn context",
        "hashing": "hashing embedder",
        "minilm": "all-MiniLM-L6-v2",
    }
    width = 0.8 / len(runs) if runs else 0.8
    for offset, run in enumerate(runs):
        values = [run["recall"][leg]["all"] for leg in legs]
        positions = [index + offset * width for index in range(len(legs))]
        label = next((v for k, v in names.items() if k in run["embedder"]), run["embedder"])
        axis.bar(positions, values, width, label=label)
    axis.set_xticks([index + width * (len(runs) - 1) / 2 for index in range(len(legs))], labels)
    axis.tick_params(axis="x", labelsize=8)
    axis.set_ylabel("evidence recall@10")
    axis.set_ylim(0, 1)
    axis.set_title("Retrieval quality on LoCoMo conversations")
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8)
    return figure


def draw_plots() -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    medium, large, quality = _results("medium"), _results("large"), _results("quality")
    drawers: dict[str, Callable[[], Any]] = {
        "latency": lambda: _plot_latency(plt, medium, large),
        "throughput": lambda: _plot_throughput(plt, medium, large),
        "ingest": lambda: _plot_ingest(plt, medium, large),
        "quality": lambda: _plot_quality(plt, quality),
    }
    sources = {"latency": large, "throughput": large, "ingest": large, "quality": quality}
    images = {}
    for name, draw in drawers.items():
        figure = draw()
        figure.text(
            0.99, -0.02, f"measured {_when(sources[name])}", ha="right", va="top", fontsize=7
        )
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={})
        plt.close(figure)
        images[name] = buffer.getvalue()
    return images


def render_benchmark_figures() -> str:
    medium, large = _results("medium"), _results("large")
    runs = (("100,000 records, 100 tenants", medium), ("1,000,000 records, 1,000 tenants", large))
    out = [
        _table(
            ["run", "date", "machine"],
            ([name, _day(results), _machine(results)] for name, results in runs),
        ),
        "",
    ]

    def row(figure: str, get: Callable[[dict[str, Any]], Any]) -> list[Any]:
        values = []
        for _, results in runs:
            try:
                values.append(get(results))
            except (KeyError, TypeError):
                values.append("—")
        return [figure, *values]

    def latency(tenant: str, layer: str, mode: str) -> Callable[[dict[str, Any]], str]:
        def get(results: dict[str, Any]) -> str:
            figures = results["latency_ms"][tenant][f"{layer} {mode}"]
            return f"{figures['p50']:.1f} / {figures['p95']:.1f}"

        return get

    rows = [
        row(
            "ingest, records/s written to searchable (2 workers)",
            lambda r: r["ingest"]["service"]["records_per_second"],
        ),
        row(
            "the same as a share of the bulk floor",
            lambda r: f"{r['ingest']['ratio']:.0%}",
        ),
        row(
            "MiniLM: pipeline / bare encode() throughput",
            lambda r: f"{r['ingest']['minilm']['ratio']:.0%}",
        ),
        row(
            "30% tenant, vector query p50 / p95 ms through the API",
            latency("large (30%)", "api", "vector"),
        ),
        row(
            "30% tenant, hybrid query p50 / p95 ms through the API",
            latency("large (30%)", "api", "hybrid"),
        ),
        row(
            "30% tenant, hybrid p50 / p95 ms as one raw SQL statement",
            latency("large (30%)", "raw sql", "hybrid"),
        ),
        row(
            "1% tenant, hybrid query p50 / p95 ms through the API",
            latency("1% tenant", "api", "hybrid"),
        ),
        row(
            "hybrid queries/s, 16 clients kept busy",
            lambda r: r["concurrency"]["16"]["steady"]["qps"],
        ),
        row(
            "filtered recall@10 at 1% / 10% / 100% of the tenant",
            lambda r: " / ".join(
                str(r["filtered_recall"][share]["recall@10"]) for share in ("1%", "10%", "100%")
            ),
        ),
        row(
            "30% tenant, known-item recall@10 vector / keyword / hybrid",
            lambda r: " / ".join(
                str(r["known_item"]["large (30%)"][mode]["recall@10"])
                for mode in ("vector", "keyword", "hybrid")
            ),
        ),
        row(
            "mixed load, 32 clients: 5xx / cross-tenant items",
            lambda r: f"{r['load']['errors_5xx']} / {r['load']['cross_tenant_items']}",
        ),
        row(
            "LangGraph PostgresStore ingest, records/s",
            lambda r: r["peer"]["ingest"]["records_per_second"],
        ),
        row(
            "PostgresStore, 30% tenant search p50 ms / recall@10",
            lambda r: (
                f"{r['peer']['large (30%)']['p50']} / {r['peer']['large (30%)']['recall@10']}"
            ),
        ),
    ]
    out.append(_table(["figure", *(name for name, _ in runs)], rows))
    return "\n".join(out)


def _when(results: dict[str, Any]) -> str:
    return f"{_day(results)}, {_machine(results)}"


def render_admin_figures() -> str:
    runs = [_results("admin-100000"), _results("admin-1000000")]
    pages = list(runs[-1]["pages"])
    rows = [
        [page, *(f"{run['pages'][page]['ms']:,.0f} ms" for run in runs)]
        for page in pages
        if all(page in run["pages"] for run in runs)
    ]
    rows.append(
        [
            "import: the request (stores the file)",
            *(f"{run['import']['request_seconds']} s" for run in runs),
        ]
    )
    rows.append(
        [
            "import: the worker, lines/s (peak RSS)",
            *(
                f"{run['import']['lines_per_second']:,} ({run['import']['worker_peak_rss_mb']} MB)"
                for run in runs
            ),
        ]
    )
    header = [
        "admin page or step",
        *(f"{run['records']:,} records, {run['import']['lines']:,}-line import" for run in runs),
    ]
    return f"*{_when(runs[-1])}; `python -m benchmarks.admin`.*\n\n" + _table(header, rows)


def render_harness_figures() -> str:
    history, consolidation = _results("history"), _results("consolidation")
    rerank, model = _results("rerank"), _results("model-change")
    out = ["### History\n"]
    out.append(
        f"*{_when(history)}; `python -m benchmarks.history`, {history['records']:,} keyed "
        "records.* Writes with history on, as a multiple of history off:\n"
    )
    out.append(
        _table(
            ["write", "on / off"],
            [
                ["insert (writes no version)", history["ratio"]["insert_batch_ms"]],
                ["upsert by key", history["ratio"]["upsert_batch_ms"]],
                ["update by id", history["ratio"]["update_call_ms"]],
            ],
        )
    )
    out.append("\n### Consolidation\n")
    out.append(
        f"*{_when(consolidation)}; `python -m benchmarks.consolidation`, "
        f"{consolidation['namespaces']} namespaces × {consolidation['turns']} turns.*\n"
    )
    out.append(
        _table(
            ["extractor", "turns/s through the worker path", "extract call p50 ms"],
            [
                [
                    "built-in",
                    consolidation["builtin"]["turns_per_second"],
                    consolidation["builtin"]["extract_p50_ms"],
                ],
                [
                    "OpenAI-compatible HTTP (a local server answering at once)",
                    consolidation["http"]["turns_per_second"],
                    consolidation["http"]["extract_p50_ms"],
                ],
            ],
        )
    )
    out.append("\n### Reranking\n")
    out.append(
        f"*{_when(rerank)}; `python -m benchmarks.rerank`, {rerank['records']:,} passages, "
        f"{rerank['queries']} queries, against a local server that answers at once (so "
        "without a model's inference time).*\n"
    )
    out.append(
        _table(
            ["candidates", "query p50 ms off → on", "added p50 ms", "the HTTP call p50 ms"],
            [
                [
                    count,
                    f"{figures['off_p50_ms']} → {figures['on_p50_ms']}",
                    figures["added_p50_ms"],
                    figures["rerank_call_p50_ms"],
                ]
                for count, figures in rerank["candidates"].items()
            ],
        )
    )
    out.append(
        f"\nA refused connection costs {rerank['degraded']['p50_ms'] / 1000:.2f} s a query "
        "(the default retries) before the fused order is answered."
    )
    out.append("\n### Changing the embedding model\n")
    out.append(
        f"*{_when(model)}; `python -m benchmarks.model_change`, {model['passages']:,} "
        f"passages, {model['queries']} known-item questions, `{model['old']}` → "
        f"`{model['new']}`; the merge memoryhub uses: {model['chosen_merge']}.*\n"
    )
    states = [
        ("before the change", "before"),
        ("half re-embedded", f"half ({model['chosen_merge']})"),
        ("after", "after"),
    ]
    out.append(
        _table(
            ["state", "vector recall@10", "hybrid recall@10", "hybrid p50 ms"],
            [
                [
                    label,
                    model["states"][key]["vector"]["recall@10"],
                    model["states"][key]["hybrid"]["recall@10"],
                    model["states"][key]["hybrid"]["p50_ms"],
                ]
                for label, key in states
                if key in model["states"]
            ],
        )
    )
    return "\n".join(out)


def render_quality_figures() -> str:
    quality = _results("quality")
    rows = []
    for run in quality["runs"]:
        recall = run["recall"]
        rows.append(
            [
                run["set"],
                run["embedder"],
                *(
                    recall[leg]["all"]
                    for leg in ("vector@10", "keyword@10", "hybrid@10", "BM25@10", "context")
                ),
            ]
        )
    return f"*{_when(quality)}; `python -m benchmarks.quality`.*\n\n" + _table(
        [
            "set",
            "embedder",
            "vector",
            "keyword",
            "hybrid",
            "BM25 baseline",
            "hybrid + context_turns 1",
        ],
        rows,
    )


# --- the hooks ----------------------------------------------------------------------

_plots: dict[str, bytes] = {}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    _plots.update(draw_plots())
    for name, image in _plots.items():
        files.append(File.generated(config, f"benchmarks/{name}.png", content=image))
    files.append(
        File.generated(
            config, "reference/openapi.json", content=json.dumps(openapi_schema(), indent=2)
        )
    )
    # The data sets' provenance and licences, as the harness documents them.
    datasets = (ROOT / "benchmarks" / "DATASETS.md").read_text()
    files.append(File.generated(config, "benchmarks/datasets.md", content=datasets))
    return files


RENDERERS: dict[str, Callable[[str, Page], str]] = {
    "rest-api": lambda markdown, page: render_rest_api(),
    "mcp-tools": lambda markdown, page: render_mcp_tools(),
    "settings": lambda markdown, page: render_settings(),
    "checks": lambda markdown, page: render_checks(),
    "commands": lambda markdown, page: render_commands(),
    "error-codes": render_error_codes,
    "benchmark-figures": lambda markdown, page: render_benchmark_figures(),
    "benchmark-admin": lambda markdown, page: render_admin_figures(),
    "benchmark-harness": lambda markdown, page: render_harness_figures(),
    "benchmark-quality": lambda markdown, page: render_quality_figures(),
}


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            log.warning("%s: no generator named %r", page.file.src_uri, name)
            return ""
        return RENDERERS[name](markdown, page)

    return MARKER.sub(replace, markdown)
