# Ferrite: the two commands a newcomer needs are `make run` and `make test`.

CARGO ?= cargo
VENV := .venv
PYTHON := $(VENV)/bin/python
# Extra arguments for `make run`, e.g. `make run ARGS="--shards 2"`.
ARGS ?=

.PHONY: run build image test test-rust test-python test-docker test-c test-bench test-fuzz bench lint deps clean

## run: build the release binaries and start a server on the embedded default configuration
run: build
	./target/release/ferrite-server $(ARGS)

## build: build the release binaries (ferrite-server, ferrite, ferrite-echo, the ferrite-ado plugin
## host) and the shipped plugins, which the server finds beside itself (libferrite_plugin_NAME.so)
build:
	$(CARGO) build --release -p ferrite-server -p ferrite-cli -p ferrite-ado \
		-p ferrite-plugin-passthru -p ferrite-plugin-counter -p ferrite-plugin-faulty -p ferrite-plugin-filter \
		-p ferrite-plugin-tabulator -p ferrite-plugin-versioning

## image: the container image ferrite:latest from the release binaries and this machine's shared
## libraries, with no registry (deploy/docker/build-image.sh; docs/deployment.md)
image: build
	deploy/docker/build-image.sh

## test: install what the tests need, check formatting and lints, run every test suite
test: deps lint test-rust test-python test-docker test-c test-bench test-fuzz

## deps: Python venv with the pinned test packages, and redis-cli (Debian's redis-tools)
deps: $(VENV)/.installed

$(VENV)/.installed: requirements-test.txt scripts/install-test-deps.sh
	scripts/install-test-deps.sh $(VENV)
	touch $@

## lint: formatting and clippy, warnings are errors (the fuzz targets too)
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check
	$(CARGO) fmt --manifest-path clients/python/Cargo.toml -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	cd clients/python && $(CARGO) clippy --all-targets -- -D warnings

## test-rust: every Rust crate's unit and integration tests (integration tests start real servers)
test-rust:
	$(CARGO) build --workspace
	$(CARGO) test --workspace

## test-python: the language-neutral protocol test vectors, the RESP listener through redis-py, and
## the Python client (clients/python, built with maturin and installed into the venv) against real
## servers; its suite runs on its own, as it has a conftest of its own
test-python: deps
	$(CARGO) build --workspace
	$(PYTHON) -m pytest testdata/protocol tests/python -q
	$(VENV)/bin/pip install --quiet --disable-pip-version-check ./clients/python
	$(PYTHON) -m pytest clients/python/tests -q

## test-docker: the three-node cluster of deploy/docker-compose.cluster.yml in containers of an image
## made from the debug binaries with no registry, on a compose project of its own that it removes;
## skipped, saying why, where no Docker engine answers (tests/docker)
test-docker: deps
	$(CARGO) build --workspace
	$(PYTHON) -m pytest tests/docker -q -rs

## test-c: the C client (libferrite) against real servers, under AddressSanitizer and valgrind, and
## the C and C++ examples built through pkg-config
test-c: deps
	clients/c/tests/run.sh

## test-bench: the benchmark comparison in its quick form (every scenario, ~1 s per point, debug
## binaries, results in a temporary directory): proves bench/compare works; fails if any point fails
test-bench: deps
	$(CARGO) build -p ferrite-server -p ferrite-cli -p ferrite-ado -p ferrite-plugin-passthru -p ferrite-plugin-counter
	bench/compare --quick --debug --no-build

## test-fuzz: build the cargo-fuzz targets with libFuzzer's coverage instrumentation (stable Rust:
## the sanitizer-coverage passes cargo-fuzz uses) and fuzz each for FUZZ_SECONDS (default 15):
## write-ahead log replay, checkpoint loading, native protocol frames, RESP commands. Corpora grow in
## fuzz/corpus/TARGET (not committed); a longer run: `make test-fuzz FUZZ_SECONDS=3600`.
FUZZ_SECONDS ?= 15
FUZZ_TARGETS := wal_replay checkpoint_load frame_decode resp_parse
FUZZ_TRIPLE := $(shell rustc -vV | sed -n 's/^host: //p')
FUZZ_RUSTFLAGS := -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
	-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
	-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing
test-fuzz:
	RUSTFLAGS="$(FUZZ_RUSTFLAGS)" $(CARGO) build --manifest-path fuzz/Cargo.toml --target $(FUZZ_TRIPLE)
	@for target in $(FUZZ_TARGETS); do \
		mkdir -p fuzz/corpus/$$target; \
		if ! fuzz/target/$(FUZZ_TRIPLE)/debug/$$target -max_total_time=$(FUZZ_SECONDS) -max_len=16384 \
			fuzz/corpus/$$target > fuzz/target/$$target.log 2>&1; then \
			tail -40 fuzz/target/$$target.log; echo "$$target: FAILED (crash input in the current directory)"; exit 1; \
		fi; \
		echo "$$target: $$(grep -E '^Done' fuzz/target/$$target.log), 0 crashes"; \
	done

## bench: the full comparison with Redis and memcached (about 24 minutes; run it on a quiet
## machine): writes bench/results/<date>.md, .json and plots. See docs/benchmarks.md.
bench: deps
	bench/compare

clean:
	$(CARGO) clean
	rm -rf $(VENV)
