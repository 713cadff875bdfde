# The README's two commands: `make demo` and `make test`. Both set up .venv from scratch when needed.
PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip --disable-pip-version-check
# this machine's pip config lists local mirrors that warn on every package; keep the log readable
QUIET   := 2>&1 | { grep -v "^WARNING: Location" || true; }
SHELL   := /bin/bash
.SHELLFLAGS := -o pipefail -c
EXTRAS  ?= test,spark

.PHONY: demo test test-deep bench wheel install venv clean spark-archive

$(PY):
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "logtide needs Python >= 3.10"'
	$(PYTHON) -m venv $(VENV)

# build requirements, installed once per change of pyproject.toml
$(VENV)/.build-deps: pyproject.toml | $(PY)
	$(PIP) install -q --upgrade pip "setuptools>=77" wheel build "Cython>=3.0" "numpy>=1.24" $(QUIET)
	touch $@

venv: $(VENV)/.build-deps

# a compiled wheel, built against the venv's Cython and numpy
wheel: $(VENV)/.build-deps
	# build/lib is setuptools' staging copy: a module deleted from the tree would stay in it (and in the wheel)
	rm -rf dist build/lib.* build/bdist.*
	$(PY) -m build --wheel --no-isolation --outdir dist . > build.log 2>&1 || (tail -40 build.log; exit 1)
	@ls dist/*.whl

# install the wheel (always replaces the installed copy), then its runtime deps and extras
install: wheel
	$(PIP) install -q --force-reinstall --no-deps dist/logtide-*.whl $(QUIET)
	$(PIP) install -q "$$(ls dist/logtide-*.whl)[$(EXTRAS)]" $(QUIET)

demo: EXTRAS = spark
demo: install
	$(VENV)/bin/logtide demo

# Three pytest-xdist workers, a test file to each at a time (module fixtures such as a Spark session stay
# shared): most of the suite waits on real processes, sockets and fsync, so on two CPUs two workers
# run in three quarters of one's wall time, and three in 86% of two's (17.5 against 20.3 minutes on a
# slow 2-vCPU host). The longest files go first (tests/conftest.py, LONG_FIRST), in that order.
# TEST_WORKERS=0 runs in one process.
# --durations: the slowest tests are listed, since CI must stay under 30 minutes
TEST_WORKERS ?= 3
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
test: install
	$(VENV)/bin/pytest -q $(XDIST) --durations=20

# every property (hypothesis) test with 20x its examples and no deadlines (tests/hypothesis_profiles.py);
# tens of minutes, not run by CI. Each test's name is printed as it finishes; the slowest are listed at the end.
.PHONY: test-deep
test-deep: install
	HYPOTHESIS_PROFILE=deep $(VENV)/bin/pytest -v $(XDIST) -m property --durations=25

bench: install
	$(PY) -m bench.report

clean:
	rm -rf build dist *.egg-info build.log $(VENV)

# the venv with the compiled wheel, packed for Spark executors: spark.archives=dist/logtide-spark-env.tar.gz#environment
# and PYSPARK_PYTHON=./environment/bin/python (docs/spark.md)
spark-archive: EXTRAS = spark
spark-archive: install
	$(VENV)/bin/venv-pack -p $(VENV) -o dist/logtide-spark-env.tar.gz --force 2>&1 | tr "\r" "\n" | tail -1
	@ls -l dist/logtide-spark-env.tar.gz

# regenerate *_pb2.py beside every .proto (the generated modules are committed)
.PHONY: proto
# (run as a script: it needs only grpc_tools, not an installed logtide)
proto: venv
	$(PIP) install -q "grpcio-tools>=1.60" $(QUIET)
	$(PY) engine/rpc/protogen.py $(CURDIR)

# the meta-service benchmark's peer: Debian's etcd-server (bench_meta.py skips etcd when it is missing)
.PHONY: etcd
etcd:
	command -v etcd >/dev/null || { apt-get update -q && apt-get install -y -q etcd-server; } || \
		echo "etcd-server could not be installed: bench_meta.py will skip the etcd peer"
