# Swapless developer entry points. Every target creates .venv on first use, so a fresh
# clone needs nothing but Python 3.11+ and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.swapless-installed
# MLX's CPU wheel ships a slow reference BLAS; Debian's OpenBLAS makes fp32 matmuls ~50x
# faster (shared/NOTES-mlx.md). The app re-executes itself with it when present; tests
# and benchmarks set it here so subprocesses inherit it too.
OPENBLAS := /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
ifneq ($(wildcard $(OPENBLAS)),)
  export LD_PRELOAD := $(OPENBLAS)
endif

.PHONY: run test test-slow lint format bench screenshot package package-test install-desktop clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Swapless needs Python 3.11+"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/swapless

lint: $(STAMP)
	$(BIN)/ruff check app tests packaging
	$(BIN)/ruff format --check app tests packaging

format: $(STAMP)
	$(BIN)/ruff format app tests packaging
	$(BIN)/ruff check --fix app tests packaging

test: lint
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

test-slow: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/swapless bench --out bench-results

clean:
	rm -rf build dist .pytest_cache bench-results
