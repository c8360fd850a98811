# paygate — the two commands that matter: `make run` and `make test`.
# Every target installs what it needs (cmake, Python venv, ...) idempotently.

SHELL := /bin/bash
export CARGO_BUILD_JOBS ?= 2
NEXTEST := cargo nextest
VENV := .venv
PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.deps-stamp
PY_DEPS := x402==2.25.0

.PHONY: run test test-fast lint fmt build release deps sys-deps py-deps clean

## run: the gateway on the embedded defaults, with a dev org and route, ready for curl.
run: deps release
	$(PY) scripts/dev_env.py --binary target/release/paygate

## test: every test (unit, end-to-end through the real binary, interop with official clients).
test: deps
	PAYGATE_TEST_PYTHON=$(abspath $(PY)) $(NEXTEST) run --workspace --no-fail-fast

## test-fast: unit and component tests only (skips the end-to-end binaries).
test-fast: sys-deps
	$(NEXTEST) run --workspace -E 'not binary(/^e2e_/)'

## lint: formatting and clippy, as CI checks them.
lint: sys-deps
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

build: sys-deps
	cargo build --workspace

release: sys-deps
	cargo build --release --bin paygate

deps: sys-deps py-deps

# cmake builds pingora's zlib-ng; nextest runs the tests. Installed when missing.
sys-deps:
	@command -v cmake >/dev/null 2>&1 || { \
	  echo "installing cmake"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq cmake >/dev/null; }
	@command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest

py-deps: $(PY_STAMP)

$(PY_STAMP): Makefile
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(PY_DEPS)
	@touch $@

clean:
	cargo clean
	rm -rf $(VENV) .run
