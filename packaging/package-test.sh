#!/usr/bin/env bash
# `make package-test`: build the package on this machine and prove the frozen app works.
#
# Linux (CI): installs the Debian packages the build and the checks need when they are
# missing (as root), runs `make package`, validates the desktop entry, then runs the
# frozen app headless: its --smoke-test with and without the OpenBLAS preload, a
# --soak of SWAPLESS_SOAK_SECONDS (default 120: long enough for a PySide6 that drops
# references to None while painting to crash, which it does within two minutes), and
# one `chat` turn that must preload OpenBLAS (when installed) and train the same demo
# tokenizer as the source checkout; where this checkout built the native kernel, the
# frozen app must carry and use it (`native_kernel_checks`). macOS: builds, verifies
# the signature and runs the same checks on dist/Swapless.app.
#
# Prints the build time and the bundle size at the end. SWAPLESS_SMOKE_TIMEOUT (s)
# bounds each run of the frozen app (default 600).
set -euo pipefail

cd "$(dirname "$0")/.."

MAKE=${MAKE:-make}
SMOKE_TIMEOUT=${SWAPLESS_SMOKE_TIMEOUT:-600}
SOAK_SECONDS=${SWAPLESS_SOAK_SECONDS:-120}
OPENBLAS=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
# app/cli/blas.py prefers BLIS when both are installed.
BLIS=/usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3

say() { printf 'package-test: %s\n' "$*"; }
fail() {
    printf 'package-test: FAILED: %s\n' "$*" >&2
    exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# macOS has no `timeout` unless coreutils is installed.
bounded() {
    if command -v timeout >/dev/null; then
        timeout "$SMOKE_TIMEOUT" "$@"
    else
        "$@"
    fi
}

# --- build tools ------------------------------------------------------------------

ensure_linux_tools() {
    local missing=() python=${PYTHON:-python3} shared
    # PyInstaller reads binaries' dependencies with objdump/ldd.
    command -v objdump >/dev/null || missing+=(binutils)
    command -v desktop-file-validate >/dev/null || missing+=(desktop-file-utils)
    # PyInstaller bundles the shared libpython; Debian's python3 links it statically
    # and ships the shared one in libpython3.X.
    shared=$("$python" -c 'import sysconfig as s; print(s.get_config_var("Py_ENABLE_SHARED") or 0)')
    if [[ "$shared" == 0 ]] && command -v dpkg >/dev/null; then
        local version
        version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
        ldconfig -p | grep -q "libpython$version.so" || missing+=("libpython$version")
    fi
    ((${#missing[@]} == 0)) && return
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        say "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
            { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
                "${missing[@]}" >/dev/null; }
    else
        fail "missing ${missing[*]}; install them (e.g. sudo apt-get install ${missing[*]})"
    fi
}

# --- frozen app runs ------------------------------------------------------------------

# run_frozen NAME [ENV=VALUE...] -- ARGS...: run the frozen app headless, with a fresh
# SWAPLESS_HOME ($work/NAME) and without the Makefile's LD_PRELOAD, so the app's own
# OpenBLAS re-exec is what is tested.
run_frozen() {
    local name=$1
    shift
    local envs=()
    while [[ $1 != -- ]]; do
        envs+=("$1")
        shift
    done
    shift
    mkdir -p "$work/$name"
    # ${a[@]+"${a[@]}"}: an empty array under `set -u` in macOS's bash 3.2.
    bounded env -u LD_PRELOAD QT_QPA_PLATFORM=offscreen SWAPLESS_HOME="$work/$name" \
        ${envs[@]+"${envs[@]}"} "$APP_BIN" "$@"
}

smoke_test() {
    local name=$1
    shift
    say "smoke test ($name): $APP_BIN --smoke-test"
    run_frozen "smoke-$name" "$@" -- --smoke-test </dev/null ||
        fail "the frozen app's smoke test failed ($name)"
}

soak_test() {
    say "soak: $APP_BIN --soak $SOAK_SECONDS"
    run_frozen soak -- --soak "$SOAK_SECONDS" </dev/null ||
        fail "the frozen app did not hold up for $SOAK_SECONDS s"
}

chat_turn_checks() {
    say "chat turn: echo hi | $APP_BIN chat --json --max-tokens 4"
    mkdir -p "$work/ld"
    local envs=()
    if [[ "$(uname -s)" == Linux ]]; then
        envs=(LD_DEBUG=libs LD_DEBUG_OUTPUT="$work/ld/trace")
    fi
    echo hi | run_frozen chat ${envs[@]+"${envs[@]}"} -- chat --json --max-tokens 4 >"$work/reply.json" ||
        fail "the frozen app's chat turn failed"
    grep -q '"generated_tokens": 4' "$work/reply.json" ||
        fail "unexpected chat reply: $(cat "$work/reply.json")"

    local blas=
    if [[ -f $BLIS ]]; then blas=$BLIS; elif [[ -f $OPENBLAS ]]; then blas=$OPENBLAS; fi
    if [[ "$(uname -s)" == Linux && -n $blas ]]; then
        grep -qs "calling init: $blas" "$work"/ld/trace.* ||
            fail "the frozen app did not re-execute itself with $blas preloaded"
        say "$blas was preloaded by the frozen app's re-exec"
    fi

    # The demo tokenizer is trained on the stdlib sources bundled for it
    # (packaging/swapless.spec): the frozen app must train the checkout's tokenizer.
    mkdir -p "$work/source"
    echo hi | bounded env -u LD_PRELOAD SWAPLESS_HOME="$work/source" \
        .venv/bin/swapless chat --json --max-tokens 1 >/dev/null ||
        fail "the source checkout's chat turn failed"
    cmp -s "$work/chat/models/demo/tokenizer.json" \
        "$work/source/models/demo/tokenizer.json" ||
        fail "the frozen app trained a different demo tokenizer than the checkout"
    say "the frozen app trained the same demo tokenizer as the checkout"
}

# The native quantized kernel (docs/native-kernel.md): when this checkout built it, the
# frozen app must carry it, its doctor must say it is bundled and will keep a 4-bit
# model packed, and a reply on that model must peak below the float32 weights' size
# (measured: the weights really stayed packed, so the self-test passed in the bundle).
native_kernel_checks() {
    local built model=$work/native-model
    built=$(.venv/bin/python -c \
        'from app.core.engine.cpu import native_build as n; print(n.state().path or "")')
    if [[ -z $built ]]; then
        say "no native kernel built here: the frozen app keeps the float32 path (not checked)"
        return
    fi
    say "native kernel: a 4-bit model, the frozen app's doctor and one reply"
    run_frozen native-make -- make-model "$model" --shape small --bits 4 >/dev/null ||
        fail "the frozen app could not build a 4-bit model"
    run_frozen native-doctor -- doctor --json --model "$model" >"$work/doctor.json" ||
        fail "the frozen app's doctor failed"
    run_frozen native-doctor-off SWAPLESS_NATIVE_KERNEL=0 -- \
        doctor --json --model "$model" >"$work/doctor-off.json" ||
        fail "the frozen app's doctor failed (kernel switched off)"
    echo hi | run_frozen native-chat -- chat --json --model "$model" --max-tokens 4 \
        >"$work/native-reply.json" || fail "the frozen app's reply on a 4-bit model failed"
    .venv/bin/python - "$work" <<'PY' || fail "the frozen app does not use its native kernel"
import json
import sys

work = sys.argv[1]
with open(f"{work}/doctor.json") as f:
    on = json.load(f)
with open(f"{work}/doctor-off.json") as f:
    off = json.load(f)
with open(f"{work}/native-reply.json") as f:
    reply = json.loads(f.readline())
kernel = on["runtime"]["native_kernel"]
layout = on["runtime"]["weights_layout"]["layout"]
packed, dense = on["model"]["weights_bytes"], off["model"]["weights_bytes"]
peak = reply["peak_memory_bytes"]
mib = 2**20
print(
    f"package-test: doctor: kernel {kernel!r}, weights {layout} {packed / mib:.1f} MiB "
    f"(float32: {dense / mib:.1f} MiB); a reply peaked at {peak / mib:.1f} MiB"
)
ok = kernel.startswith("bundled with the app") and layout == "packed"
sys.exit(0 if ok and packed < peak < dense else 1)
PY
}

# --- main -----------------------------------------------------------------------------

case "$(uname -s)" in
Linux)
    ensure_linux_tools
    APP_DIR=dist/swapless
    APP_BIN=$APP_DIR/swapless
    ;;
Darwin)
    APP_DIR=dist/Swapless.app
    APP_BIN=$APP_DIR/Contents/MacOS/Swapless
    ;;
*) fail "unsupported platform $(uname -s)" ;;
esac

started=$(date +%s)
"$MAKE" package
build_seconds=$(($(date +%s) - started))
[[ -x $APP_BIN ]] || fail "$APP_BIN was not built"

if [[ "$(uname -s)" == Linux ]]; then
    say "desktop-file-validate $APP_DIR/swapless.desktop"
    desktop-file-validate "$APP_DIR/swapless.desktop" ||
        fail "the desktop entry is invalid"
    smoke_test "OpenBLAS re-exec"
    smoke_test "no OpenBLAS" SWAPLESS_NO_OPENBLAS=1
    native_kernel_checks
else
    codesign --verify --deep --strict "$APP_DIR" || fail "the app's signature is invalid"
    smoke_test "Metal"
fi
soak_test
chat_turn_checks

size=$(du -sh "$APP_DIR" | cut -f1)
say "passed: built $APP_DIR ($size) in ${build_seconds}s"
