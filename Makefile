# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
FLASK  := $(BIN)/flask --app app

.PHONY: install migrate seed run test lint format bench chaos catalog clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

migrate: install
	$(FLASK) db upgrade

seed: migrate
	@if [ ! -f instance/.demo-seeded ]; then $(FLASK) demo seed && touch instance/.demo-seeded; fi

# The backoffice on http://127.0.0.1:5000 with lean workers, on SQLite + SqliteHuey.
run: seed
	@trap 'kill 0' INT TERM EXIT; \
	$(FLASK) workers --mode lean & \
	$(FLASK) run --host 127.0.0.1 --port $${PORT:-5000}

# The whole suite, on the embedded default (SQLite + SqliteHuey), or on
# PostgreSQL + Redis with TEST_BACKEND=postgres (what CI runs too).
test: migrate
	$(BIN)/pytest -q $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

catalog: install
	$(FLASK) events catalog

bench: install
	$(BIN)/python -m bench.run

chaos: install
	$(BIN)/python -m bench.chaos

clean:
	rm -rf $(VENV) instance .pytest_cache
