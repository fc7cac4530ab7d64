# Conveyor: `make run` and `make test` do all set-up on a fresh machine.
VENV      ?= .venv
PY        := $(VENV)/bin/python
PIP       := $(VENV)/bin/pip
STAMP     := $(VENV)/.installed
# The interpreter the venv is made from: Debian's python3, built with profile-guided and
# link-time optimisation. A python3 built from source without --enable-optimizations (a
# default pyenv build) costs a node 10-35 % more CPU per job (docs/performance.md, seventh
# look).
# `make BASE_PYTHON=python3.12 ...` picks another; a venv made from another is made again.
BASE_PYTHON ?= /usr/bin/python3
PORT      ?= 7711
WEB_PORT  ?= 3333
DATA      ?= ./data
# Debian packages the test suite, the benchmarks and the Spark example drive for real.
DEBS      := redis-server redis-tools openjdk-17-jre-headless chromium prometheus openssl gcc python3 python3-venv python3-dev
APT       := $(shell [ "$$(id -u)" = 0 ] && echo apt-get || echo sudo apt-get)

.PHONY: run test test-pure bench bench-pressure bench-spark lint sysdeps venv clean compile FORCE

# The venv is made again when it was made from another interpreter than BASE_PYTHON.
VENV_BASE := $(shell $(PY) -c 'import sys; print(sys.base_prefix)' 2>/dev/null)
WANT_BASE := $(shell $(BASE_PYTHON) -c 'import sys; print(sys.base_prefix)' 2>/dev/null)
ifneq ($(VENV_BASE),$(WANT_BASE))
$(STAMP): FORCE
endif

$(STAMP): pyproject.toml | sysdeps
	$(BASE_PYTHON) -m venv --clear $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,cron,metrics,spark,web]'
	touch $(STAMP)

venv: $(STAMP)

# The modules of conveyor/compiled.py, built with Cython beside their .py (only those whose
# source changed are rebuilt). A node loads a .so only when it is not older than its .py.
compile: $(STAMP)
	$(PY) scripts/compile.py

# Installs what is missing only, so a machine that has everything does no network I/O.
sysdeps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null && command -v redis-benchmark >/dev/null || missing="$$missing redis-tools"; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	command -v gcc >/dev/null || missing="$$missing gcc"; \
	$(BASE_PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3 python3-venv"; \
	$(BASE_PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null \
	  || missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(APT) update -qq && DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq $$missing; \
	fi

# sysdeps too: the Spark example (examples/spark_pipeline.py) needs Java next to the node.
# A node and the web console beside it; Ctrl-C stops both.
run: sysdeps $(STAMP) compile
	mkdir -p $(DATA)
	@echo "node:    127.0.0.1:$(PORT)  (redis-cli -p $(PORT))"
	@echo "console: http://127.0.0.1:$(WEB_PORT)/"
	$(VENV)/bin/conveyor server --port $(PORT) --dir $(DATA) & node=$$!; \
	trap 'kill $$node 2>/dev/null; wait $$node' EXIT INT TERM; \
	$(VENV)/bin/conveyor web --nodes 127.0.0.1:$(PORT) --port $(WEB_PORT)

# The suite runs twice: whole with the compiled modules (the test of conveyor/compiled.py
# checks they loaded), then again as pure Python for the packages whose modules have
# compiled twins and the nodes built on them; each run spreads its test files over both
# cores. Workers, the console, Spark, pressure and the client run no compiled module of
# their own, and the compiled pass has covered them: their pure pass (~4.5 min, which
# kept CI at its 30-minute budget) is `make test-pure-all`, not part of CI.
TEST_WORKERS ?= 2
PYTEST = $(VENV)/bin/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile
test: sysdeps $(STAMP) compile
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m fuzz.run --seconds $(FUZZ_TEST_SECONDS) --ci
	CONVEYOR_EXPECT_COMPILED=1 $(PYTEST)
	$(MAKE) --no-print-directory test-pure

PURE_TESTS ?= tests/core tests/protocol tests/node tests/persistence tests/cluster tests/sim tests/fuzz
test-pure: sysdeps $(STAMP)
	CONVEYOR_PURE_PYTHON=1 $(PYTEST) $(PURE_TESTS)

# The whole suite as pure Python, the packages test-pure leaves out included.
.PHONY: test-pure-all
test-pure-all: sysdeps $(STAMP)
	CONVEYOR_PURE_PYTHON=1 $(PYTEST)

# Coverage-guided fuzzing (atheris) of the RESP parser and the command parsers, SECONDS per
# target; prints executions, corpus size, coverage, crashes and hangs (docs/fuzzing.md).
# `make test` runs the same for FUZZ_TEST_SECONDS per target, from the seeds only.
SECONDS ?= 300
FUZZ_DIR ?= /tmp/conveyor-fuzz
FUZZ_TEST_SECONDS ?= 30
.PHONY: fuzz
fuzz: $(STAMP)
	$(PY) -m fuzz.run --seconds $(SECONDS) --workdir $(FUZZ_DIR) --keep-going

# The node beside redis-server, then the AOF (ADDJOB with appendonly no/everysec/always,
# loading and rewriting 1,000,000 jobs, SIGKILLs with everysec): bench/aof_bench.py; then
# the compiled modules beside their pure-Python source (bench/codec_bench.py).
bench: sysdeps $(STAMP) compile
	$(PY) -m bench.node_bench
	$(PY) -m bench.aof_bench
	$(PY) -m bench.codec_bench

bench-pressure: sysdeps $(STAMP)
	$(PY) -m bench.pressure_bench

bench-spark: sysdeps $(STAMP)
	$(PY) -m bench.spark_bench
	$(PY) -m bench.analyze_bench

# The probes of issue 9 (huge counts, giant and half-sent bulks, a slow reader, idle
# connections, cycling blocked clients, an AUTH burst, held replies), each on a fresh node,
# with the longest stall another client saw and RSS before/peak/after; bounded, ~2 min.
.PHONY: bench-abuse
bench-abuse: sysdeps $(STAMP)
	$(PY) -m bench.abuse_bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) build *.egg-info

# No-op Python tasks/s through `conveyor worker --app` and /bin/true queue-script runs/s,
# beside Dramatiq, Celery and python-rq (the `bench` extra) on a local redis-server; ~2 min.
.PHONY: bench-workers
bench-workers: sysdeps $(STAMP)
	$(PIP) install -q -e '.[bench]'
	$(PY) -m bench.workers_bench

# The console's cost to the node: 100 queues at 5,000 jobs/s (or what the machine sustains),
# node CPU% with and without 10 clients streaming the overview page; ~45 s, 127.0.0.1 only.
.PHONY: bench-web
bench-web: sysdeps $(STAMP)
	$(PY) -m bench.web_bench

.PHONY: bench-tls
bench-tls: sysdeps $(STAMP)
	$(PY) -m bench.tls_bench

# 3 local nodes, REPLICATE 3: ADDJOB sync -P 1/-P 16, ASYNC, one pipelining connection,
# beside a lone node (and a C Disque cluster when DISQUE_SERVER names a binary); then 60 s
# of producers and consumers while a random node is SIGKILLed every 10 s; ~3 min.
.PHONY: bench-cluster
bench-cluster: sysdeps $(STAMP) compile
	$(PY) -m bench.cluster_bench
	$(PY) -m bench.federation_bench
	$(PY) -m bench.failover_bench

# One column of bench-cluster (sync -P 1 unless COLUMN says) over 30 rounds on two
# Conveyor clusters of the same build and a C Disque one (DISQUE_SERVER): above, below or
# level with C Disque, beside how far identical builds land apart; ~3 min.
COLUMN ?= sync -P 1
.PHONY: bench-parity
bench-parity: sysdeps $(STAMP) compile
	$(PY) -m bench.parity_bench --column "$(COLUMN)"

# The CPU of bench-cluster's columns split by process (origin, replicas, client), with
# each one's wake-ups and system calls; C Disque's too with DISQUE_SERVER.
.PHONY: bench-cluster-split
bench-cluster-split: sysdeps $(STAMP) compile
	$(PY) -m bench.cluster_split

# Disque's own cluster test suite (its tests/, from DISQUE_SRC: a checkout of
# antirez/disque) against Conveyor nodes, ~10 min; a yardstick, not part of `make test`.
.PHONY: disque-suite
disque-suite: $(STAMP) compile
	@command -v tclsh >/dev/null || { $(APT) update -qq && DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq tcl; }
	$(PY) scripts/disque_suite.py
