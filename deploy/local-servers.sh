#!/usr/bin/env bash
# Start whichever of the local PostgreSQL, Redis and RabbitMQ is down (the development machines'
# servers, see design.md), and wait until each answers.
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
  echo "starting RabbitMQ"
  rabbitmq-server -detached
  rabbitmqctl await_startup --timeout 120 >/dev/null
fi
for port in 5432 6379 5672; do
  for _ in $(seq 1 60); do answers "$port" && break; sleep 1; done
  answers "$port" || { echo "server on port $port does not answer" >&2; exit 1; }
done
