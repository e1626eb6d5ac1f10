# vmsched: `make run` starts everything locally; `make test` runs the test suite on the real servers.
SHELL := /bin/bash
UV_VERSION := 0.13.9
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
PY := .venv/bin/python

.PHONY: run test test-faults test-cluster test-fast lint format bench bench-placement bench-journal bench-single soak servers clean asyncapi docs sync-client

.tools/bin/uv:
	python3 -m venv .tools
	.tools/bin/pip install --quiet uv==$(UV_VERSION)

.venv/.synced: pyproject.toml uv.lock */*/pyproject.toml | $(if $(findstring .tools,$(UV)),.tools/bin/uv)
	@pkg-config --exists libvirt 2>/dev/null || { echo "libvirt-python (the libvirt agent, in the dev environment) builds against libvirt's headers: apt-get install libvirt-dev pkg-config" >&2; exit 1; }
	$(UV) sync --frozen --quiet
	touch $@

servers: ## start any local server (PostgreSQL, Redis, RabbitMQ) that is down
	bash deploy/local-servers.sh

run: .venv/.synced servers ## API, gateway, scheduler and 3 simulated agents; Ctrl-C stops all
	$(PY) -m devtools.run

# Two workers (pytest-xdist), each with its own vhost, database and key prefix (tests/servers.py), a
# module's tests on one worker (--dist loadfile: a module's stack or fleet is started once); then the few
# tests marked alone, which would disturb another worker, by themselves. TEST_WORKERS=0: one, in-process
# (docs/testing.md, "Two workers").
TEST_WORKERS ?= 2
test: .venv/.synced servers ## the suite on the real servers, but the long multi-stack runs (test-faults) and the servers of their own (test-cluster)
	$(PY) -m pytest -m "not own_servers and not slow and not alone" -n $(TEST_WORKERS) --dist loadfile
	$(PY) -m pytest -m "alone and not own_servers and not slow"

test-faults: .venv/.synced servers ## kill -9, SIGTERM, a Redis flush, a broker restart, four-scheduler races, two cells: whole stacks mid-run (CI runs it after make test)
	$(PY) -m pytest -m "slow and not own_servers"

test-cluster: .venv/.synced servers ## servers of their own: a three-node RabbitMQ cluster loses a node, Redis and PostgreSQL restart mid-run (CI runs it after make test)
	$(PY) -m pytest -m own_servers -s -p no:logging tests/faults/test_cluster.py tests/faults/test_restarts.py

test-fast: .venv/.synced ## every test that needs no server, over the whole tree (the integration marker comes from the fixtures: docs/testing.md)
	$(PY) -m pytest -m "not integration"

lint: .venv/.synced ## ruff + mypy --strict
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy libs/contract/src libs/client/src libs/domain/src libs/runtime/src libs/amqp/src libs/pg/src libs/redis/src libs/placement/src libs/agent/src services/api/src services/scheduler/src services/agent-gateway/src services/router/src
	.venv/bin/mypy tests devtools bench

format: .venv/.synced
	.venv/bin/ruff format .
	.venv/bin/ruff check --fix .

bench-placement: .venv/.synced ## one decision over 10,000 hosts, every strategy
	$(PY) bench/placement_bench.py

bench-journal: .venv/.synced ## the decision journal: a checkpoint and an entry over 10,000 hosts, bytes per decision
	$(PY) bench/journal_bench.py

bench-single: .venv/.synced servers ## one VM per request: a lone client, 32 clients, an open loop, batches (about 15 minutes)
	$(PY) bench/single_bench.py

bench: .venv/.synced servers ## the end-to-end performance harness (never part of make test)
	$(PY) bench/placement_bench.py
	$(PY) bench/broker_floor.py
	$(PY) bench/single_bench.py
	$(PY) bench/e2e_bench.py
	$(PY) bench/rebalance_bench.py
	$(PY) bench/drain_bench.py
	$(PY) bench/fence_bench.py
	$(PY) bench/journal_bench.py

soak: .venv/.synced servers ## an hour (VMSCHED_SOAK_MINUTES, 60) of churn on 1,000 simulated hosts with restarts, migrations and drains, watched; figures in docs/img/soak.png (never part of make test)
	$(PY) bench/soak.py

bench-fence: .venv/.synced servers ## a fenced host's 100 VMs running again elsewhere (3 runs, median)
	$(PY) bench/fence_bench.py

docs: .venv/.synced ## rewrite what docs/ shows of the code (the lifecycle table)
	$(PY) -m devtools.docs

sync-client: .venv/.synced ## write vmsched_client's blocking client (sync.py) from its asyncio one (aio.py)
	$(PY) -m devtools.sync_client

asyncapi: .venv/.synced ## regenerate docs/asyncapi.json (the event contract) from the code
	$(PY) -m vmsched_api.asyncapi > docs/asyncapi.json

clean:
	rm -rf .run .pytest_cache .mypy_cache .ruff_cache
