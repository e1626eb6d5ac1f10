#!/usr/bin/env bash
# A three-node RabbitMQ cluster on this machine, beside the local broker: nodes vmsched-cluster-a,
# -b and -c on AMQP ports 5701-5703. `start` prints the VMSCHED_AMQP_URL naming all three; `stop`
# removes them and their data; `status` says how many run. See docs/deploy.md.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m devtools.broker_cluster "${1:-status}"
