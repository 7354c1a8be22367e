# make            the virtual environment (.venv) and the local broker's pinned Kafka release (fetched
#                 from Maven Central into the user's cache, ~/.cache/crawl-dedup)
# make check      lint, types and the unit tests (no broker): the loop while editing, about 3 minutes
# make test       everything CI runs: lint and types, the documentation site, the alert rules
#                 (promtool), then the whole suite compiled (its own broker; a real Prometheus and
#                 pywb) beside the unit tests uncompiled and the wheel check (see test below)
# make docs       the documentation site from docs/ into site/ (mkdocs build --strict)
# make demo       the main job: a local broker, the stages, a replayed crawl, a summary
# make reliability  the long crash, rebalance, hostile-input, broker-fault (a 3-node cluster), full-disk
#                 and hostile-cluster suite (not part of make test)
# make bench      benchmarks; results under bench/results/ (not part of make test)
# make kafka-start / kafka-stop    the local broker for manual use (127.0.0.1:19092)

PYTHON_BIN ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
JARS := $(VENV)/.kafka-fetched

.PHONY: all venv jars pywb prometheus alerts docs check test suite beside-suite lint unit unit-pure wheel-check reliability bench bench-warc bench-failover bench-runtime bench-url bench-content bench-latency bench-revisit bench-reshard bench-scrapy demo kafka-start kafka-stop clean

all: venv jars

# The package is installed editable, its per-record hot path compiled with mypyc (setup.py lists the
# modules): it is installed again when one of those sources changes, so an edit never runs as stale
# compiled code (importing streams refuses that too). CRAWL_DEDUP_PURE_PYTHON=1 builds it uncompiled.
COMPILED_SOURCES := $(shell grep -o '"streams/[a-z_/]*\.py"' setup.py | tr -d '"')

venv: $(STAMP)
$(STAMP): pyproject.toml constraints.txt setup.py $(COMPILED_SOURCES)
	test -x $(PY) || { $(PYTHON_BIN) -m venv $(VENV) && $(PY) -m pip install -q --upgrade pip; }
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,docs]'
	rm -f $(BENCH_STAMP)
	touch $@

# The benchmarks' baselines (the bench extra): installed once, with the package again.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,docs,bench]'
	touch $@

# The release streams/broker/kafka_release.json pins (tools/kafka_release.py writes it from kafka/pom.xml),
# checked by SHA-256, in the user's cache: the same code path an installed package takes.
jars: $(JARS)
$(JARS): $(STAMP) streams/broker/kafka_release.json
	$(PY) -m streams kafka fetch
	touch $@

# The commit messages checked are those of the commits HEAD adds to COMMITS_BASE (tools/commit_messages.py).
COMMITS_BASE ?= main

lint: venv
	$(VENV)/bin/ruff check streams tests testing bench tools docs setup.py
	$(VENV)/bin/mypy streams
	$(PY) tools/import_cycles.py streams
	$(PY) tools/import_rules.py streams
	$(PY) tools/commit_messages.py $(COMMITS_BASE)

# pytest processes per run (pytest-xdist): 3 on the project's 2-core machines. A broker test spends
# most of its time waiting for the broker and for its workers, and the tests beside it use that time
# (with 2, the CPU was 40-70% idle in the second half of a fresh-clone CI's suite); the processes
# share one broker (tests/conftest.py), and a module's tests stay in one process (--dist loadscope:
# its module fixtures are made once). TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 3
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope)

# The loop while editing: what CI checks first, without a broker.
check: lint unit

unit: venv prometheus
	$(PY) -m pytest -m "not kafka" -q $(XDIST)

# The unit tests again on the sources uncompiled, as a CRAWL_DEDUP_PURE_PYTHON=1 build runs them: the
# tracked files are copied to a temporary directory without the extensions, and pytest puts that
# copy's streams package first on the path (pyproject.toml: pythonpath). Its empty manifest of
# compiled modules keeps the editable install's finder from supplying this tree's. The tests run are
# those of the code that differs between the two builds (setup.py's compiled modules: records,
# plain, urls, the runtime's batch loop, the URL stage, the page stage's shard records) and of the
# code that drives it (the stages, the integrations, ops); the others (tests/pages, tests/tools, the
# command line, the configuration and documentation checks) run code that is the same in both
# builds, and run compiled in the suite.
PURE_TESTS := tests/runtime tests/stages tests/urls tests/integrations tests/ops tests/test_records.py \
	tests/test_plain.py tests/test_compiled.py
unit-pure: venv prometheus
	@set -e; copy=$$(mktemp -d); trap 'rm -rf "$$copy"' EXIT; \
	git ls-files -z | xargs -0 cp -P --parents -t "$$copy"; \
	printf 'SOURCES: dict[str, str] = {}\n' > "$$copy/streams/_compiled.py"; \
	cd "$$copy"; \
	$(CURDIR)/$(PY) -c 'import sys, streams.runtime.engine as e; sys.exit(e.__file__.endswith(".py") is False)'; \
	$(CURDIR)/$(PY) -m pytest -m "not kafka" -q -p no:cacheprovider $(PURE_TESTS)

# Everything CI runs (bash .ci/run). The quick checks first, two at a time (the installs and the
# compile are single-threaded: pywb's virtualenv is made beside the package's, the lint beside the
# documentation site); then the whole suite, compiled, and beside it, at the same time, the unit
# tests uncompiled and then the wheel check: they have processes, brokers and ports of their own,
# and the suite's broker tests leave the CPU idle much of the time. Each part's output is printed
# whole when it ends (--output-sync).
test:
	$(MAKE) --no-print-directory -j2 --output-sync=target venv pywb jars lint docs alerts
	$(MAKE) --no-print-directory -j2 --output-sync=target suite beside-suite

# The suite names pywb's environment in CRAWL_DEDUP_PYWB, so the web-archive replay test fails rather
# than skips when it is missing; it ends with its 25 slowest steps, so that every CI run says where
# the time goes.
suite: venv jars prometheus pywb
	CRAWL_DEDUP_PYWB=$(CURDIR)/$(PYWB_VENV)/bin $(PY) -m pytest -m "not slow" -q --durations=25 $(XDIST)

beside-suite: unit-pure
	$(MAKE) --no-print-directory wheel-check

# pywb (PyPI), the replay server the web-archive test serves warc-dedup's output with
# (tests/archives/test_pywb_replay.py), in a virtualenv of its own: it pins an old redis and werkzeug
# (testing/pywb-requirements.txt says why).
PYWB_VENV := .venv-pywb
PYWB_STAMP := $(PYWB_VENV)/.installed

pywb: $(PYWB_STAMP)
$(PYWB_STAMP): testing/pywb-requirements.txt testing/pywb-constraints.txt
	test -x $(PYWB_VENV)/bin/python || $(PYTHON_BIN) -m venv $(PYWB_VENV)
	$(PYWB_VENV)/bin/python -m pip install -q -c testing/pywb-constraints.txt -r testing/pywb-requirements.txt
	touch $@

# Debian's Prometheus: promtool for the rules, and the server tests/kafka/test_prometheus_kafka.py runs
# itself on 127.0.0.1 with the shipped configuration. Installed here when missing and running as
# root (as bench-url installs redis-server); the package's own service is never used: where its
# install started it, it is stopped again.
prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  prometheus >/dev/null && { service prometheus stop >/dev/null 2>&1 || true; }; }

# The alert rules and the scrape configuration (ops/prometheus): checked, and every rule unit-tested
# on synthetic series (alerts.test.yml).
alerts: prometheus
	promtool check rules ops/prometheus/alerts.yml
	promtool check config ops/prometheus/prometheus.yml
	cd ops/prometheus && promtool test rules alerts.test.yml

# The documentation site (mkdocs.yml): the generated reference pages checked against the code, then
# built strict, so a broken link or anchor, or a page of docs/ left out of the nav, fails.
docs: venv
	$(PY) docs/gen_config_table.py --check
	$(PY) docs/gen_reference.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# The package as an operator installs it (tools/wheel_check.py): the wheel built from a clean clone,
# installed into a new virtualenv and run from elsewhere, offline and against a broker it starts
# from an empty release cache; then the Scrapy tests at the lowest Scrapy release supported.
wheel-check: venv
	$(PY) tools/wheel_check.py

# The long reliability suite (issues 7, 37): the slow-marked tests, not part of make test. The cluster
# tests start a 3-node cluster of their own (STREAMS_TEST_CLUSTER_PORT, default 19892, and the five
# ports above); the full-disk tests mount a tmpfs, and are skipped where that is not permitted.
reliability: venv jars
	$(PY) -m pytest -m slow -q -s

bench: bench-runtime bench-url bench-content bench-revisit bench-reshard bench-scrapy bench-warc bench-failover

# Runtimes measured beside ours (decision 0001), each in a virtualenv of its own: quixstreams needs
# an older confluent-kafka, PyFlink an old apache-beam and pyarrow. .venv-NAME is made from
# bench/runtimes/NAME-requirements.txt under NAME-constraints.txt.
QUIX_VENV := .venv-quix
QUIX_STAMP := $(QUIX_VENV)/.installed
FLINK_VENV := .venv-flink
FLINK_STAMP := $(FLINK_VENV)/.installed

.venv-%/.installed: bench/runtimes/%-requirements.txt bench/runtimes/%-constraints.txt
	test -x .venv-$*/bin/python || $(PYTHON_BIN) -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q -c bench/runtimes/$*-constraints.txt -r bench/runtimes/$*-requirements.txt
	touch $@

# The JVM workers (Kafka Streams, the Java passthrough) and the Flink Kafka connector jar, from Maven
# Central into ~/.m2 on the first build: offline after that (-o), online only when something is missing.
JVM_DIR := bench/runtimes/jvm
JVM_JAR := $(JVM_DIR)/target/runtime-bench.jar

$(JVM_JAR): $(JVM_DIR)/pom.xml $(shell find $(JVM_DIR)/src -type f 2>/dev/null)
	cd $(JVM_DIR) && { mvn -q -o package 2>/dev/null || mvn -q package; }

RUNTIMES := passthrough,jvm-passthrough,confluent,quix,url-passthrough,url-jvm-passthrough,url-dedup,kstreams,flink
KILL_RUNTIMES := confluent,quix,url-dedup,kstreams,flink

bench-runtime: venv jars $(QUIX_STAMP) $(FLINK_STAMP) $(JVM_JAR)
	$(PY) -m bench.runtime_bench --runtimes $(RUNTIMES) --kill-runtimes $(KILL_RUNTIMES) --kills 20

# The URL benchmark compares with a scrapy-redis style dedup: w3lib and redis-py from PyPI, and
# Debian's redis-server (installed here when missing and running as root).
bench-url: $(BENCH_STAMP) jars
	command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq redis-server; }
	$(PY) -m bench.url_bench

# The page stage: extraction quality, near-duplicate quality beside 1e0ng/simhash and datasketch
# (from PyPI), the decision on person-judged ClueWeb pairs beside S3, MinHash and SimHash (skipped
# when ../shared/corpus/copycat-clueweb is absent), then throughput, lookup time and SIGKILLs
# through Kafka, and copies racing their originals in every arrival order. Needs ../shared/corpus.
bench-content: $(BENCH_STAMP) jars
	$(PY) -m bench.extract_bench
	$(PY) -m bench.neardup_bench
	$(PY) -m bench.clueweb_bench
	$(PY) -m bench.content_bench
	$(PY) -m bench.race_bench
	$(MAKE) bench-latency

# Latency at a steady light load (issue 39): write -> verdict (20 pages/s of the shared corpus's
# HTML) and write -> new URL (200 URLs/s) readable with read_committed, 1 and 2 workers, beside one
# raw transactional Kafka hop measured in the same run. Needs ../shared/corpus.
bench-latency: venv jars
	$(PY) -m bench.latency_bench

# Scrapy on the stages beside scrapy-redis (PyPI) on Debian's redis-server (installed here when
# missing and running as root): the same local site, spider, processes and concurrency.
bench-scrapy: $(BENCH_STAMP) jars
	command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq redis-server; }
	$(PY) -m bench.scrapy_bench

# warc-dedup beside content-seen --offline on two crawls of the shared corpus's pages as WARCs
# (docs/web-archives.md, Throughput). Needs ../shared/corpus (generated pages without it).
bench-warc: venv
	$(PY) -m bench.warc_bench --pages 482 --rounds 5

# More than one worker: a worker SIGKILLed for good and a worker added, with and without standby
# replicas, every record's wait and exactly once (read_committed), at 1 and 2 million URLs and on the
# shared corpus's pages; then a restore from an empty state directory beside a plain consumer reading
# the same changelog (docs/operations.md, "Standby replicas and failover").
bench-failover: venv jars
	$(PY) -m bench.failover_bench --urls 1000000,2000000
	$(PY) -m bench.restore_bench --urls 2000000 --rounds 3

# A reshard's stop: seconds per million stored entries, each stage, 4 -> 8 shards, on the broker.
bench-reshard: venv jars
	$(PY) -m bench.reshard_bench

# The revisit policies, closed loop through `revisit --offline`: on simulated pages, then on two years
# of real change histories of five public repositories (markdown-it-py from PyPI renders them; skipped,
# with a line saying so, when their mirrors are absent: bench/revisit_history.py).
bench-revisit: $(BENCH_STAMP)
	$(PY) -m bench.revisit_sim
	$(PY) -m bench.revisit_real

demo: venv jars
	$(PY) -m streams demo

kafka-start: venv jars
	$(PY) -m streams kafka start

kafka-stop: venv
	$(PY) -m streams kafka stop

clean:
	-$(PY) -m streams kafka stop
	rm -rf $(VENV) $(QUIX_VENV) $(FLINK_VENV) $(JVM_DIR)/target $(PYWB_VENV) state site .pytest_cache .mypy_cache .ruff_cache build streams/_compiled.py
	find . -name '*.so' -not -path './.venv/*' -delete
