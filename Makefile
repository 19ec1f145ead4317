# The two commands of the README: `make demo` and `make test`. Each sets up everything
# it needs on a fresh machine (Python 3.11 + Java 17): the venv under .venv/ with the
# pinned dependencies of requirements.lock, Java via apt-get if it is missing, and for
# the tests PostgreSQL and Chromium via apt-get.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_SECONDS ?= 480
PYTEST_ARGS ?=

.PHONY: demo ui test lint setup java postgres browser compat kafka s3 hosts clean

setup: $(STAMP) java

java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "Java not found: installing openjdk-17-jre-headless with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; }
	@java -version 2>&1 | grep -v '^Picked up' | head -1 | grep -Eq '"(17|21)\.' || { \
	  echo "error: Spark 4.3 needs Java 17 or 21 on PATH; found: $$(java -version 2>&1 | grep -v '^Picked up' | head -1)"; exit 1; }

# The ledger tests start a throwaway PostgreSQL server on 127.0.0.1 from Debian's package.
postgres:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { \
	  echo "PostgreSQL server not found: installing postgresql with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; }

# The cross-host tests simulate hosts as network namespaces with iproute2's `ip` (they need root; elsewhere they skip
# and say why).
hosts:
	@command -v ip >/dev/null 2>&1 || { \
	  echo "iproute2 not found: installing it with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2; }

# The UI test drives the Dagster webserver with Playwright in Debian's headless Chromium.
browser:
	@test -x /usr/bin/chromium || { \
	  echo "Chromium not found: installing chromium with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# A real Kafka broker (KRaft) and Spark's Kafka connector, resolved from Maven Central with mvn into .jvm/
# (jvm/*.pom.xml pin them; dagster_reconf/workloads/kafka.py finds them). Spark itself comes with pyspark.
JVM := .jvm
MVN := mvn -q -B -Dmaven.repo.local=$(CURDIR)/$(JVM)/m2
kafka: $(JVM)/kafka-broker/.resolved $(JVM)/spark-sql-kafka/.resolved

NEED_MVN := command -v mvn >/dev/null 2>&1 || { echo "Maven not found: installing maven with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven; }

$(JVM)/kafka-broker/.resolved: jvm/kafka-broker.pom.xml
	@$(NEED_MVN)
	rm -rf $(@D) && $(MVN) -f $< dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(@D)
	touch $@

# Only what pyspark lacks: the connector, its token provider, kafka-clients and commons-pool2.
$(JVM)/spark-sql-kafka/.resolved: jvm/spark-sql-kafka.pom.xml $(JVM)/kafka-broker/.resolved
	rm -rf $(@D) && $(MVN) -f $< dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(@D) \
	  -DexcludeArtifactIds=hadoop-client-api,hadoop-client-runtime,scala-library,slf4j-api,lz4-java,snappy-java,spark-tags_2.13,jsr305,scala-parallel-collections_2.13
	touch $@

# Hadoop's S3A filesystem for s3a:// storage (jvm/hadoop-aws.pom.xml says why these jars), into .jvm/hadoop-aws/, and
# the S3 API server the tests keep such storage on (S3Proxy's self-contained jar), into .jvm/s3proxy/.
s3: $(JVM)/hadoop-aws/.resolved $(JVM)/s3proxy/.resolved

$(JVM)/s3proxy/.resolved: jvm/s3proxy.pom.xml
	@$(NEED_MVN)
	rm -rf $(@D) && $(MVN) -f $< dependency:copy-dependencies -DexcludeTransitive=true -DoutputDirectory=$(CURDIR)/$(@D)
	touch $@

$(JVM)/hadoop-aws/.resolved: jvm/hadoop-aws.pom.xml
	@$(NEED_MVN)
	rm -rf $(@D) && $(MVN) -f $< dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(@D) \
	  -DexcludeGroupIds=io.netty -DexcludeArtifactIds=commons-codec,slf4j-api,commons-logging,httpclient,httpcore
	touch $@

# examples/orders is a user's project of its own (a dg project): it installs beside the package, as a user's does.
$(STAMP): requirements.lock pyproject.toml examples/orders/pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "need Python 3.11, got " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e . -e examples/orders
	touch $@

# The closed loop through the real Dagster daemon (see dagster_reconf/workloads/demo.py).
demo: setup
	$(BIN)/python -m dagster_reconf.workloads.demo --home .reconf --timeout-s $(DEMO_SECONDS)

# The Dagster UI on 127.0.0.1:3000 over the demo's instance (runs, assets, plots, checks).
ui: setup
	DAGSTER_HOME=$${DAGSTER_HOME:-$(CURDIR)/.reconf/dagster} RECONF_HOME=$(CURDIR)/.reconf \
	  $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

# The tests start about a hundred short-lived JVMs (drivers, standbys, a cluster, a broker), each of which spent up to
# a CPU on C2 compilation over its first minute: the tests' JVMs compile with C1 alone. Measured on 2 CPUs, two
# integration tests alone: the machine's CPU 216 -> 141 s, their run 135 -> 110 s. `make demo` and the benchmarks keep
# the JVM's defaults.
TEST_JAVA_OPTIONS := -XX:TieredStopAtLevel=1

# Three parts. The modules timed against their own deadlines (the closed loop through the daemon, the stream on other
# hosts that outlives its driver host) run first, alone: beside the rest a machine's two CPUs make their JVMs and
# S3 server wait. Then, side by side, the slowest modules (driver crashes at every step, warm-driver handovers, a
# standalone cluster, storage URLs, the operator zoo, the cluster loop, read limits), which spend most of their time
# waiting for JVMs to start and stop, in a second pytest (their own temp dir, no shared cache), and the rest followed
# by the compat venv: the two lanes about equally long (the figures are in the commit messages that moved a module).
SOLO_TESTS := tests/integration/test_closed_loop_ui.py tests/integration/test_hosts.py
SLOW_TESTS := tests/integration/test_reconfiguration_crash.py tests/integration/test_handover.py \
  tests/integration/test_cluster.py tests/integration/test_storage_url.py tests/integration/test_operator_zoo.py \
  tests/integration/test_cluster_loop.py tests/integration/test_read_limits.py

# Another combination of the ranges in pyproject.toml (requirements-compat.txt: dagster 1.12, pyspark 4.2, GX 1.20, the
# rest at their newest): the package installs into it, imports, loads the reference definitions and passes the unit tests;
# the Kafka tests that exercise the connector run there too, where pyspark 4.2 pairs exactly with the served connector
# 4.2.0: a Nexmark query over a topic reconfigured and checked against the batch job, the Kafka sink, and the missing
# connector refused. The scale-up on consumer lag, the precopy over Kafka and the other Nexmark query are the control
# plane's own logic, the same under either venv: the main venv runs them, and leaves these to the compat venv.
KAFKA := tests/integration/test_kafka.py
COMPAT_KAFKA := $(KAFKA)::test_nexmark_over_a_topic_is_reconfigured_and_equals_the_batch_job_over_the_topic[q5-change0] \
  $(KAFKA)::test_a_stream_into_a_kafka_sink_is_labelled_at_least_once_and_replays_within_retention \
  $(KAFKA)::test_a_stream_without_the_connector_is_refused_with_the_fix \
  $(KAFKA)::test_the_connector_jars_missing_is_said_with_the_fix
COMPAT := .venv-compat
compat: java kafka
	test -x $(COMPAT)/bin/python || $(PYTHON) -m venv $(COMPAT)
	$(COMPAT)/bin/python -m pip install -q --upgrade pip
	$(COMPAT)/bin/python -m pip install -q -r requirements-compat.txt -e '.[test]'
	$(COMPAT)/bin/python -m pip install -q --no-deps -e examples/orders
	$(COMPAT)/bin/python -c 'import dagster, pyspark, definitions; from dagster_reconf import __version__; \
	  dagster.Definitions.validate_loadable(definitions.defs); \
	  print(f"dagster-reconf {__version__} loads with dagster {dagster.__version__}, pyspark {pyspark.__version__}")'
	$(COMPAT)/bin/python -m pytest -q -p no:cacheprovider tests/unit
	tmp=$$(mktemp -d); $(COMPAT)/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) --basetemp=$$tmp/t \
	  $(addprefix ',$(addsuffix ',$(COMPAT_KAFKA))); rc=$$?; rm -rf $$tmp; exit $$rc

# ruff: the lint rules and line length of pyproject.toml, and its formatting (`ruff format .` fixes that).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint postgres browser kafka s3 hosts
	@times=$$(mktemp -d); \
	export RECONF_REQUIRE_POSTGRES=1 RECONF_REQUIRE_BROWSER=1 RECONF_TEST_TIMES=$$times \
	  JAVA_TOOL_OPTIONS="$(TEST_JAVA_OPTIONS) $${JAVA_TOOL_OPTIONS:-}"; \
	$(BIN)/python -m pytest $(PYTEST_ARGS) -p no:cacheprovider $(SOLO_TESTS); solo=$$?; \
	slow_log=$$(mktemp); slow_tmp=$$(mktemp -d); \
	$(BIN)/python -m pytest $(PYTEST_ARGS) -p no:cacheprovider --basetemp=$$slow_tmp/t $(SLOW_TESTS) \
	  > $$slow_log 2>&1 & slow=$$!; \
	$(BIN)/python -m pytest $(PYTEST_ARGS) $(addprefix --ignore=,$(SOLO_TESTS) $(SLOW_TESTS)) \
	  $(addprefix '--deselect=,$(addsuffix ',$(COMPAT_KAFKA))); rest=$$?; \
	$(MAKE) --no-print-directory compat; compat=$$?; \
	wait $$slow; slow_rc=$$?; echo "== $(SLOW_TESTS) (run beside the rest and the compat venv) =="; cat $$slow_log; \
	rm -rf $$slow_log $$slow_tmp; \
	$(BIN)/python -m tests.timeout_margin $$times; rm -rf $$times; \
	echo "exit codes: closed loop $$solo, rest $$rest, compat venv $$compat, slow modules $$slow_rc"; \
	[ $$solo -eq 0 ] && [ $$rest -eq 0 ] && [ $$compat -eq 0 ] && [ $$slow_rc -eq 0 ]

clean:
	rm -rf .reconf .pytest_cache build *.egg-info $(COMPAT)
