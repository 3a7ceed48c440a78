# Swapless developer entry points. Every target creates .venv on first use, so a fresh
# clone needs nothing but Python 3.11+ and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.swapless-installed
# MLX's CPU wheel ships a slow reference BLAS; Debian's BLIS (else OpenBLAS) makes fp32
# matmuls ~50x faster, and BLIS also streams one-row (decode) matmuls at memory speed
# (app/cli/blas/preload.py). The app re-executes itself with it when present; tests and
# benchmarks set it here so subprocesses inherit it too.
BLIS := /usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3
OPENBLAS := /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
ifneq ($(wildcard $(BLIS)),)
  export LD_PRELOAD := $(BLIS)
  # Where BLIS's detection falls back to its generic kernels (a CPU newer than the
  # library: 5x slower GEMMs), the fastest sub-configuration measured (app/cli/blas/blis_arch.py).
  BLIS_ARCH := $(shell $(PYTHON) app/cli/blas/blis_arch.py $(BLIS) 2>/dev/null)
  ifneq ($(BLIS_ARCH),)
    export BLIS_ARCH_TYPE := $(BLIS_ARCH)
  endif
else ifneq ($(wildcard $(OPENBLAS)),)
  export LD_PRELOAD := $(OPENBLAS)
endif

.PHONY: native peers run test test-slow soak lint format bench screenshot screenshots screenshots-look package package-test install-desktop clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Swapless needs Python 3.11+"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

# The optional native quantized kernel (docs/native-kernel.md), built into
# ~/.cache/swapless/native once per source and MLX version; without it the CPU backend
# dequantizes. Setup builds it best effort (minutes, once): one line says how it went,
# a failure never stops `make run` or `make test` and is not retried until the sources
# change (`swapless doctor` says why; `make native` retries and shows the build).
NATIVE_STAMP := $(VENV)/.swapless-native
$(NATIVE_STAMP): $(STAMP) $(wildcard app/core/engine/cpu/native/*)
	-nice $(BIN)/python -m app.core.engine.cpu.native_build --best-effort
	touch $(NATIVE_STAMP)

native: $(STAMP)
	nice $(BIN)/python -m app.core.engine.cpu.native_build

run: $(NATIVE_STAMP)
	$(BIN)/swapless

# llama.cpp to compare with (docs/peers.md): llama-bench and llama-quantize built from
# the llama-cpp-python sdist, and a venv for its converter (torch), once, into
# ~/.cache/swapless/peers; `swapless bench --only peers` then runs side by side.
peers: $(STAMP)
	$(BIN)/python -m app.bench.parts.peers.llama_build

lint: $(STAMP)
	$(BIN)/ruff check app tests $(wildcard packaging)
	$(BIN)/ruff format --check app tests $(wildcard packaging)
	$(BIN)/mypy app

format: $(STAMP)
	$(BIN)/ruff format app tests packaging
	$(BIN)/ruff check --fix app tests packaging

test: lint $(NATIVE_STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

test-slow: $(NATIVE_STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -m slow

# The real window for three minutes (demo model, real engine): the memory gauge live,
# streamed replies, a trim. Fails on a crash, a Qt warning, a stuck reply, None's
# reference count falling, or the window widening itself. SOAK_SECONDS to change it.
SOAK_SECONDS ?= 180
soak: $(NATIVE_STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m app.ui.checks.soak --seconds $(SOAK_SECONDS)

bench: $(NATIVE_STAMP)
	$(BIN)/swapless bench --out bench-results

# Packaging (README "Packaging", packaging/): a double-clickable app built by PyInstaller.
# Linux: dist/swapless/ (+ swapless.desktop); macOS: dist/Swapless.app and a DMG.
PACKAGE_STAMP := $(VENV)/.swapless-package-installed

$(PACKAGE_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[package]'
	touch $(PACKAGE_STAMP)

# The kernel, when built, travels inside the frozen app (packaging/swapless.spec).
package: $(PACKAGE_STAMP) $(NATIVE_STAMP)
	$(BIN)/python packaging/build.py

# Builds on this machine (installing missing Debian tools as root), validates the
# desktop entry and runs the frozen app headless; CI runs it after `make test`.
package-test:
	bash packaging/package-test.sh

# Adds the built Linux app to the user's application menu (~/.local/share).
install-desktop:
	$(PYTHON) packaging/linux/desktop_entry.py install dist/swapless

clean:
	rm -rf build dist .pytest_cache bench-results

# The README screenshot: the real window under Xvfb, the demo model, a short real
# conversation (Debian packages: xvfb xauth libxcb-icccm4 libxcb-keysyms1, see .ci/run).
screenshot: $(STAMP)
	xvfb-run -a -s "-screen 0 1600x1000x24" $(BIN)/python -m app.ui.checks.screenshot resources/screenshot.png

# The pictures of the window's behaviour (docs/screenshots/): 1280x800 after a reply, a
# trim card with its summary, the notice area under (staged) pressure, dark theme live.
screenshots: $(STAMP)
	xvfb-run -a -s "-screen 0 1600x1000x24" $(BIN)/python -m app.ui.checks.screenshot --set docs/screenshots
	xvfb-run -a -s "-screen 0 1600x1000x24" $(BIN)/python -m app.ui.checks.thinking_screenshots docs/screenshots

# The design, scene by scene (docs/look.md): welcome, a streamed reply, Thinking, the
# preset editor, Models, light and dark, at 1280x800 and 1366x768. The raw pictures go
# to build/look-screenshots; docs/screenshots holds a curated, palette-reduced set.
screenshots-look: $(STAMP)
	for size in 1280x800 1366x768; do for theme in light dark; do \
	  xvfb-run -a -s "-screen 0 $${size}x24" $(BIN)/python -m app.ui.checks.look_screenshots \
	    build/look-screenshots --theme $$theme --prefix $$theme-$${size%x*} || exit 1; \
	done; done
