# Conveyor: `make run` and `make test` do all set-up on a fresh machine.
VENV      ?= .venv
PY        := $(VENV)/bin/python
PIP       := $(VENV)/bin/pip
STAMP     := $(VENV)/.installed
PORT      ?= 7711
DATA      ?= ./data
# Debian packages the test suite, the benchmarks and the Spark example drive for real.
DEBS      := redis-server redis-tools openjdk-17-jre-headless
APT       := $(shell [ "$$(id -u)" = 0 ] && echo apt-get || echo sudo apt-get)

.PHONY: run test bench bench-pressure bench-spark lint sysdeps venv clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,cron,metrics,spark]'
	touch $(STAMP)

venv: $(STAMP)

# Installs what is missing only, so a machine that has everything does no network I/O.
sysdeps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null && command -v redis-benchmark >/dev/null || missing="$$missing redis-tools"; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(APT) update -qq && DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq $$missing; \
	fi

# sysdeps too: the Spark example (examples/spark_pipeline.py) needs Java next to the node.
run: sysdeps $(STAMP)
	mkdir -p $(DATA)
	$(VENV)/bin/conveyor server --port $(PORT) --dir $(DATA)

test: sysdeps $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest -q -p no:cacheprovider

bench: sysdeps $(STAMP)
	$(PY) -m bench.node_bench

bench-pressure: sysdeps $(STAMP)
	$(PY) -m bench.pressure_bench

bench-spark: sysdeps $(STAMP)
	$(PY) -m bench.spark_bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) build *.egg-info
