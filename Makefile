# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
FLASK  := $(BIN)/flask --app app

.PHONY: install migrate seed run test lint format bench chaos cluster catalog clean lock audit

# Exactly the versions of requirements.lock (the app and its dev extra, for Python 3.11),
# each checked against its hashes, then the project itself without resolving anything more.
$(BIN)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

# The tools that write and audit the lock live in a venv of their own, never in the app's.
TOOLS := .venv-tools/bin
$(TOOLS)/.installed:
	$(PYTHON) -m venv .venv-tools
	$(TOOLS)/pip install --quiet --upgrade pip pip-tools pip-audit
	touch $@

# requirements.lock from pyproject.toml: after a dependency changed there. The pins it
# has are kept unless LOCK_ARGS=--upgrade (or --upgrade-package NAME) says otherwise.
lock: $(TOOLS)/.installed
	CUSTOM_COMPILE_COMMAND="make lock" $(TOOLS)/pip-compile --quiet --extra dev \
		--generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
		--no-emit-find-links $(LOCK_ARGS) --output-file requirements.lock pyproject.toml

# Known vulnerabilities of the locked versions, as written. --strict: a version the advisory
# database (PyPI) cannot be asked about fails the audit instead of passing unaudited.
audit: $(TOOLS)/.installed
	$(TOOLS)/pip-audit --strict --require-hashes --disable-pip -r requirements.lock

# The browser test's accessibility engine (axe-core, pinned in package-lock.json): the
# tests need it, `make run` does not.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $@

install: $(BIN)/.installed

migrate: install
	$(FLASK) db upgrade

seed: migrate
	@if [ ! -f instance/.demo-seeded ]; then $(FLASK) demo seed && touch instance/.demo-seeded; fi

# The backoffice on http://127.0.0.1:5000 with lean workers, on SQLite + SqliteHuey.
# Development: plain http, so cookies are not Secure and no HSTS is sent. The web server
# starts from the web entry module (``wsgi``: logging, and the key `make migrate` made).
run: export TASKLEDGER_ENV = development
run: seed
	@trap 'kill 0' INT TERM EXIT; \
	$(FLASK) workers --mode lean & \
	$(BIN)/flask --app wsgi run --host 127.0.0.1 --port $${PORT:-5000}

# The whole suite, on the embedded default (SQLite + SqliteHuey), or on
# PostgreSQL + Redis with TEST_BACKEND=postgres (what CI runs too). The slowest tests are
# listed after it: what to look at first when the suite grows slow. The project's modules
# are compiled first: where writing bytecode is off (PYTHONDONTWRITEBYTECODE), each of the
# suite's hundreds of processes (consumers, commands, web workers) compiled them again.
test: migrate node_modules/.installed
	$(BIN)/python -m compileall -q -x '/(\.[^/]+|node_modules|build)/' .
	$(BIN)/pytest -q --durations=15 $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The generated docs: the event catalog and the README's tenant API client section.
catalog: install
	$(FLASK) events catalog
	$(FLASK) openapi readme

# The benchmarks' own extra (Celery, the peer they are measured against) comes first.
# Celery may move shared packages off their locked versions (redis): the suite then finds
# the venv is not the lock, so the next `make install` (and `make test`) installs it again.
$(BIN)/.bench-installed: pyproject.toml $(BIN)/.installed
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	rm -f $(BIN)/.installed
	touch $@

bench: install $(BIN)/.bench-installed
	$(BIN)/python -m bench.run

chaos: install
	$(BIN)/python -m bench.chaos

# Six hosts in network namespaces (db, two web, three consumer hosts) under a deploy, a
# crash and a partition, on both queue drivers; writes bench/results/cluster.md. Needs
# root, iproute2 and the PostgreSQL and Redis server binaries (it runs its own servers).
cluster: install
	$(BIN)/python -m bench.cluster

clean:
	rm -rf $(VENV) .venv-tools instance .pytest_cache
