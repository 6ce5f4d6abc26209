# The two commands a fresh clone needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run demo test test-fast lint typecheck layers docs pytest compat faults cluster proto clean native

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[cli,plot,dev,docs]'
	touch $(STAMP)

# The main job: `thrust perf e2e` for 20 s. Without --endpoints it starts `thrust serve` in a
# subprocess; a producer and a push consumer run against it, with pulsar-perf style lines every 5 s and,
# beside each interval, the event-loop lag and GC pauses of both processes. Two choices of the harness
# (docs/benchmarks.md, "The main job's latency tails"): the producer's linger batch (up to 32 messages per
# SendMessage, 2 ms), since one message per call costs the Python server ~750 µs of CPU each and 1,000/s
# of them plus the consumer's calls fill this 2-core machine; and one consumption thread, since perf's
# listener only records a sample and, when other work shares the cores, 20 threads contending for the
# GIL and the CPUs put 100-700 ms tails on the sends.
run: $(STAMP)
	$(BIN)/thrust perf e2e --duration 20 --interval 5 --rate 1000 --linger-batch 32 --linger-batch-ms 2 --threads 1

# A shorter tour: normal, FIFO and delay messages through Producer and SimpleConsumer, all accounted for.
demo: $(STAMP)
	$(BIN)/python -m thrust.cli.demo

lint: $(STAMP)
	$(BIN)/ruff check src tests scripts examples
	$(BIN)/ruff format --check src tests scripts examples

typecheck: $(STAMP)
	$(BIN)/mypy src/thrust

layers: $(STAMP)
	$(BIN)/lint-imports

# The documentation site (mkdocs.yml) into site/. --strict turns every warning into a failure: a broken link
# or anchor, a page missing from the nav, a docstring the API reference cannot parse. The CLI reference is
# generated from the argparse parsers at build time (scripts/docs_hooks.py). Not --quiet: mkdocs 1.6 counts
# the warnings that --strict fails on only when they are logged, so with --quiet a broken link passes.
# NO_MKDOCS_2_WARNING silences mkdocs-material's banner about its successor, not a warning about this site.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The native transport (native/, docs/architecture.md "The native transport"): a release wheel (abi3,
# CPython 3.11+) built by maturin with cargo from crates.io, installed into .venv (so that `transport="auto"`
# takes it there), then installed with thrust into a fresh venv and smoke-tested against `thrust serve`
# (scripts/native_smoke.py). It needs Rust (cargo); without it `make native` says so and stops.
NATIVE_STAMP := $(VENV)/.native
NATIVE_SRC := native/Cargo.toml native/Cargo.lock native/build.rs native/pyproject.toml $(wildcard native/src/*.rs)
WHEELS := native/target/wheels
$(NATIVE_STAMP): $(STAMP) $(NATIVE_SRC)
	@command -v cargo >/dev/null || { echo "make native needs Rust's cargo (https://rustup.rs, or the rustc and cargo packages of your distribution)"; exit 1; }
	rm -rf $(WHEELS)
	$(BIN)/maturin build --release --quiet -m native/Cargo.toml -o $(WHEELS)
	$(BIN)/pip install -q --force-reinstall --no-deps $(WHEELS)/thrust_native-*.whl
	rm -rf .native-smoke
	$(PY) -m venv .native-smoke
	.native-smoke/bin/pip install -q . $(WHEELS)/thrust_native-*.whl
	.native-smoke/bin/python scripts/native_smoke.py
	rm -rf .native-smoke
	touch $@
native: $(NATIVE_STAMP)

# Four workers on two cores: most of the reliability and fault tests wait (invisible times, long polls,
# a paused server) rather than compute, so they overlap well. Every phase names its transport
# ($THRUST_TRANSPORT: what a client with the default transport="auto" takes; docs/install.md): each runs on
# grpcio, and the client suites (NATIVE_SUITES) once more on the native transport. Two phases, then the
# lite step (REAL55 below):
# 1. everything that needs no real RocketMQ (`-m "$(NOT_REAL)"`), with no JVM running beside it;
# 2. the tests marked `real` (tests/conftest.py: the client suites on the real proxy, the official client
#    on it, the differential table), inside `thrust cluster --mode both --exec`, which starts a real
#    Apache RocketMQ (a local-mode proxy with its broker, and two brokers behind a cluster-mode proxy)
#    from the Maven Central jars, fetched once into ~/.cache/thrust/rocketmq; every pytest worker uses
#    those two clusters. It fails at once, naming what to install, when Java 17+ or Maven is missing.
#    Then, on the same clusters, the tests marked `realfaults` (tests/reliability/test_real_cluster.py:
#    R1-R3 and R8 kill and restart the two-broker cluster's JVMs through `thrust cluster`'s control socket), alone,
#    since nothing else may use a cluster whose proxy is down. Both run even if the first fails.
# Between the two, the client suites (tests/client, tests/push) once more with every loop on uvloop
# ($THRUST_TEST_LOOP, tests/conftest.py), against the embedded server, without coverage:
# UVLOOP_SUITES took 45 s at load 2.0 and 53 s at load 4.6 (187 tests, -n 4) on two cores.
# Phase 1 and its native run measure branch coverage of thrust in the test processes (pytest-cov, xdist
# workers combined, the native run appended;
# code run in child processes, such as `thrust serve` or the CLI, is not counted) and fails below
# COV_FLOOR: 77.87 % measured (1,509 tests, CI dry runs of 2 December at 82f7de7), rounded down.
# `-p no:thrust` keeps the package's own pytest plugin (the `thrust_server` fixture, which the suite uses
# only in child pytest processes) from importing thrust before coverage starts, which would leave every
# module's top level unmeasured. `--cov-report=` leaves out the per-file table; pytest-cov still prints
# the total ("Total coverage: ..."); `--cov-report=term:skip-covered` lists it file by file.
REAL_PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider
NOT_REAL := not real and not realfaults and not real55
# Lite topics (RocketMQ 5.5; docs/lite-topics.md) run on a real 5.5.0 in a step of their own, after the
# 5.4 phase: `thrust cluster --lite --brokers 1` (a namesrv, one broker with enableLmq and
# enableMultiDispatch, a cluster-mode proxy: 5.5.0's local mode serves no lite subscriptions), then the
# tests marked `real55` (tests/conftest.py: tests/both/test_lite.py, the lite differential table
# tests/conformance/test_differential_lite.py) on both transports, -n 2 (the cluster has one broker);
# 71 s in all at load 3 on two cores (27 tests each). Only these: 5.5.0's broker spins a core for good
# after a transaction (src/thrust/cluster/jars.py). The step runs once the 5.4 phase passed.
COV_FLOOR := 77
UVLOOP_SUITES := tests/client tests/push
# The client suites that run once more on the native transport (every phase above runs on grpcio: the
# suites outside these test no transport, or the grpcio one itself).
NATIVE_SUITES := tests/client tests/push tests/both tests/unit/test_native.py
pytest: $(STAMP) $(NATIVE_STAMP)
	THRUST_TRANSPORT=grpcio $(BIN)/python -m pytest -q -p no:cacheprovider -p no:thrust -n 4 \
	  -m "$(NOT_REAL)" --cov=thrust --cov-branch --cov-report=
	THRUST_TRANSPORT=native $(BIN)/python -m pytest -q -p no:cacheprovider -p no:thrust -n 4 \
	  -m "$(NOT_REAL)" --cov=thrust --cov-branch --cov-append --cov-report= \
	  --cov-fail-under=$(COV_FLOOR) $(NATIVE_SUITES)
	THRUST_TEST_LOOP=uvloop THRUST_TRANSPORT=grpcio $(BIN)/python -m pytest -q -p no:cacheprovider \
	  -p no:thrust -n 4 -m "$(NOT_REAL)" $(UVLOOP_SUITES)
	THRUST_TEST_LOOP=uvloop THRUST_TRANSPORT=native $(BIN)/python -m pytest -q -p no:cacheprovider \
	  -p no:thrust -n 4 -m "$(NOT_REAL)" $(UVLOOP_SUITES)
	$(BIN)/thrust cluster --mode both --exec sh -c \
	  'THRUST_TRANSPORT=grpcio $(REAL_PYTEST) -n 4 -m real; a=$$?; \
	   THRUST_TRANSPORT=native $(REAL_PYTEST) -n 4 -m real $(NATIVE_SUITES); n=$$?; \
	   THRUST_TRANSPORT=grpcio $(REAL_PYTEST) -m realfaults tests/reliability; b=$$?; \
	   THRUST_TRANSPORT=native $(REAL_PYTEST) -m realfaults tests/reliability; c=$$?; \
	   [ $$a -eq 0 ] && [ $$n -eq 0 ] && [ $$b -eq 0 ] && [ $$c -eq 0 ]'
	$(BIN)/thrust cluster --lite --brokers 1 --exec sh -c \
	  'THRUST_TRANSPORT=grpcio $(REAL_PYTEST) -n 2 -m real55; a=$$?; \
	   THRUST_TRANSPORT=native $(REAL_PYTEST) -n 2 -m real55; n=$$?; \
	   [ $$a -eq 0 ] && [ $$n -eq 0 ]'

# Faults on a real two-broker RocketMQ alone (R1-R7: brokers and proxies killed and restarted, black
# hole, slow path, orphaned transaction, rebalance), with their recovery figures printed (-s).
faults: $(STAMP)
	$(BIN)/thrust cluster --mode cluster --exec $(REAL_PYTEST) -s tests/reliability/test_real_cluster.py

# A real RocketMQ for a person: prints the gRPC endpoint, runs until Ctrl-C.
cluster: $(STAMP)
	$(BIN)/thrust cluster --mode local --topic orders --group billing

# The client tests (tests/unit, tests/client) and a round trip against `thrust serve`, in fresh venvs
# under .compat/ holding the oldest grpcio and protobuf pyproject.toml allows, then the newest
# (scripts/compat.py).
compat: $(STAMP)
	$(BIN)/python scripts/compat.py

test: lint typecheck layers docs pytest compat

# The quick loop: the unit and in-process tests, without those marked slow (long waits, child processes),
# interop (the official client) or real/realfaults (a real RocketMQ). About a minute on two quiet cores;
# `make test` still runs everything.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 4 -m "not slow and not interop and $(NOT_REAL)"

# Regenerate the protobuf/gRPC modules from src/thrust/_proto/apache/rocketmq/v2/*.proto.
proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

clean:
	rm -rf $(VENV) .compat .native-smoke build site src/*.egg-info native/target
