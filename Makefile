# Parley: two commands. `make run` starts the embedded default; `make test` runs lint, types and tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test lint typecheck pytest browser clean openapi-snapshot

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(STAMP)

run: $(STAMP)
	$(BIN)/parley up

lint: $(STAMP_TEST)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports  # the import rules of docs/architecture.md ([tool.importlinter] in pyproject.toml)

typecheck: $(STAMP_TEST)
	$(BIN)/mypy

# The playground's browser tests drive Debian's Chromium through playwright (its own browser download is
# not used). Installed here when missing and we are root with apt-get; otherwise the tests skip with a
# reason, or fail when CI=true.
browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || [ -n "$$PARLEY_CHROMIUM" ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing Debian's chromium for the browser tests"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; \
	else \
		echo "chromium is missing (apt-get install chromium as root); the browser tests will skip, or fail with CI=true"; \
	fi

# The tests run on PYTEST_WORKERS parallel pytest-xdist workers (default 2; `make test PYTEST_WORKERS=0`
# runs them in one process), each with databases and temporary directories of its own; a file's tests
# stay on one worker (--dist loadfile). Files are handed out in the order tests/conftest.py gives them
# (--no-loadscope-reorder): those with a `slow` test first, so the one-test files that take tens of
# seconds do not run last while the other worker idles.
#
# The real-time voice tests (marker `realtime`) run at the same time, in a pytest process of their own
# at normal priority, while the main suite runs at a lower one (`nice -n $(PYTEST_NICE)`, default 10:
# Linux's scheduler gives a nice-0 process about ten times the weight of a nice-10 one). They play
# audio at the wall clock's pace and need about 0.4 of a core, but they need it when the audio arrives;
# the main suite keeps both cores busy and takes whatever they leave. Their databases are named with
# `main` (no xdist worker) and a random suffix, their servers listen on ports the kernel picks, their
# temporary directories are pytest's own, so the two processes share nothing. The real-time output
# goes to $(TEST_LOGS)/realtime.log and is printed after the main suite's; `make pytest` fails if either
# failed. `make test` runs lint and types beside them too, at the main suite's priority (their output
# in $(TEST_LOGS)/lint.log, printed at the end). `make test REALTIME_APART=1` runs the real-time set
# alone after the main suite, as before. On a machine shared with other work the main suite at nice 10
# yields to all of it (a tenth of the weight of any nice-0 process): `make test PYTEST_NICE=0` there.
#
# The test processes write bytecode even where PYTHONDONTWRITEBYTECODE is set (as on the development
# machine): otherwise every pytest process (each worker, and the real-time run) rewrites and compiles
# every test module afresh while collecting (about 15 s of CPU each), and every `python -m parley`
# subprocess of the tests compiles the platform's source again (0.6 to 0.9 s of CPU each).
PYTEST_WORKERS ?= 2
PYTEST_NICE ?= 10
REALTIME_APART ?=
TEST_LOGS := .test-logs
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest
MAIN_SUITE := nice -n $(PYTEST_NICE) $(PYTEST) -m "not realtime" -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
CHECKS := $(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports && $(BIN)/mypy

# The main suite in the foreground; the real-time set beside it, or after it with REALTIME_APART set.
define RUN_TESTS
	mkdir -p $(TEST_LOGS); \
	if [ -n "$(REALTIME_APART)" ]; then \
		$(MAIN_SUITE); main=$$?; \
		$(PYTEST) -m realtime; realtime=$$?; \
	else \
		echo "The real-time tests run beside the main suite; their output follows it ($(TEST_LOGS)/realtime.log)."; \
		$(PYTEST) -m realtime >$(TEST_LOGS)/realtime.log 2>&1 & realtime_pid=$$!; \
		$(MAIN_SUITE); main=$$?; \
		wait $$realtime_pid; realtime=$$?; \
		echo "=============== the real-time tests (-m realtime, one process, beside the main suite) ==============="; \
		cat $(TEST_LOGS)/realtime.log; \
	fi
endef

pytest: $(STAMP_TEST) browser
	@$(RUN_TESTS); \
	[ $$main -eq 0 ] && [ $$realtime -eq 0 ]

test: $(STAMP_TEST) browser
	@mkdir -p $(TEST_LOGS); \
	echo "Lint and types run beside the tests; their output follows ($(TEST_LOGS)/lint.log)."; \
	nice -n $(PYTEST_NICE) sh -c '$(CHECKS)' >$(TEST_LOGS)/lint.log 2>&1 & checks_pid=$$!; \
	$(RUN_TESTS); \
	wait $$checks_pid; checks=$$?; \
	echo "=============== lint and types (ruff, lint-imports, mypy) ==============="; \
	cat $(TEST_LOGS)/lint.log; \
	[ $$main -eq 0 ] && [ $$realtime -eq 0 ] && [ $$checks -eq 0 ]

# A deliberate API change: rewrite tests/openapi_snapshot.json and tests/route_order_snapshot.txt, then
# review their diff. `make test` fails whenever the live document differs from them.
openapi-snapshot: $(STAMP_TEST)
	PARLEY_UPDATE_OPENAPI_SNAPSHOT=1 $(BIN)/python -m pytest tests/test_openapi_snapshot.py -q

clean:
	rm -rf $(VENV) .parley .pytest_cache .mypy_cache .ruff_cache $(TEST_LOGS)
