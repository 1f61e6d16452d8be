# Ferrite: the two commands a newcomer needs are `make run` and `make test`.

CARGO ?= cargo
VENV := .venv
PYTHON := $(VENV)/bin/python
# Extra arguments for `make run`, e.g. `make run ARGS="--shards 2"`.
ARGS ?=

.PHONY: run build test test-rust test-python test-bench test-fuzz bench lint deps clean

## run: build the release binaries and start a server on the embedded default configuration
run: build
	./target/release/ferrite-server $(ARGS)

## build: build the release binaries (ferrite-server, ferrite, ferrite-echo, the ferrite-ado plugin
## host) and the shipped plugins, which the server finds beside itself (libferrite_plugin_NAME.so)
build:
	$(CARGO) build --release -p ferrite-server -p ferrite-cli -p ferrite-ado \
		-p ferrite-plugin-passthru -p ferrite-plugin-counter -p ferrite-plugin-faulty -p ferrite-plugin-filter \
		-p ferrite-plugin-tabulator -p ferrite-plugin-versioning

## test: install what the tests need, check formatting and lints, run every test suite
test: deps lint test-rust test-python test-bench test-fuzz

## deps: Python venv with the pinned test packages, and redis-cli (Debian's redis-tools)
deps: $(VENV)/.installed

$(VENV)/.installed: requirements-test.txt scripts/install-test-deps.sh
	scripts/install-test-deps.sh $(VENV)
	touch $@

## lint: formatting and clippy, warnings are errors (the fuzz targets too)
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## test-rust: every Rust crate's unit and integration tests (integration tests start real servers)
test-rust:
	$(CARGO) build --workspace
	$(CARGO) test --workspace

## test-python: the language-neutral protocol test vectors, and the RESP listener through redis-py
test-python: deps
	$(CARGO) build -p ferrite-server
	$(PYTHON) -m pytest testdata/protocol tests/python -q

## test-bench: the benchmark comparison in its quick form (every scenario, ~1 s per point, debug
## binaries, results in a temporary directory): proves bench/compare works; fails if any point fails
test-bench: deps
	$(CARGO) build -p ferrite-server -p ferrite-cli -p ferrite-ado -p ferrite-plugin-passthru -p ferrite-plugin-counter
	bench/compare --quick --debug --no-build

## test-fuzz: build the cargo-fuzz targets (WAL replay, checkpoint loading) and feed each a few
## thousand random inputs; real fuzzing needs nightly: `cargo +nightly fuzz run wal_replay`
test-fuzz:
	$(CARGO) build --manifest-path fuzz/Cargo.toml
	fuzz/target/debug/wal_replay -runs=3000 -max_len=4096
	fuzz/target/debug/checkpoint_load -runs=3000 -max_len=16384

## bench: the full comparison with Redis and memcached (about 24 minutes; run it on a quiet
## machine): writes bench/results/<date>.md, .json and plots. See docs/benchmarks.md.
bench: deps
	bench/compare

clean:
	$(CARGO) clean
	rm -rf $(VENV)
