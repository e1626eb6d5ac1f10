#!/usr/bin/env bash
# Start whichever of the local PostgreSQL, Redis and RabbitMQ is down (the development machines'
# servers, see design.md), and wait until each answers; enable RabbitMQ's management plugin, through
# whose HTTP API agents are enrolled (vmsched-gateway enroll-agent, docs/security.md).
set -euo pipefail

answers() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

if ! answers 5432; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
fi
if ! answers 6379; then
  echo "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
if ! answers 5672; then
  if timeout 20 rabbitmqctl -q ping >/dev/null 2>&1; then
    # The node runs but its app was stopped (rabbitmqctl stop_app, as the broker fault test does).
    echo "starting RabbitMQ's app"
    timeout 180 rabbitmqctl -q start_app
  else
    echo "starting RabbitMQ"
    # Every agent queue holds file handles; a node left at the usual 1,024 stalls with a fleet of
    # thousands (docs/performance.md), so it starts with the hard limit.
    # The packaged wrapper switches to the rabbitmq user with su, whose login limits drop the soft
    # limit back to 1,024, so raise it inside that user's shell.
    if [ "$(id -u)" = 0 ] && id rabbitmq >/dev/null 2>&1; then
      su rabbitmq -s /bin/sh -c "ulimit -n $(ulimit -Hn) 2>/dev/null; exec rabbitmq-server -detached"
    else
      (ulimit -n "$(ulimit -Hn)" 2>/dev/null || true; rabbitmq-server -detached)
    fi
  fi
fi
for port in 5432 6379 5672; do
  # RabbitMQ takes a while to boot (await_startup fails until the node has registered, so poll).
  for _ in $(seq 1 120); do answers "$port" && break; sleep 1; done
  answers "$port" || { echo "server on port $port does not answer" >&2; exit 1; }
done
# The plugin list is kept by the node (/etc/rabbitmq/enabled_plugins), so this is needed once.
if ! answers 15672; then
  echo "enabling RabbitMQ's management plugin"
  timeout 180 rabbitmq-plugins -q enable rabbitmq_management
  for _ in $(seq 1 60); do answers 15672 && break; sleep 1; done
  answers 15672 || { echo "RabbitMQ's management API (port 15672) does not answer" >&2; exit 1; }
fi
