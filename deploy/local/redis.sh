#!/usr/bin/env bash
# Local Redis (Debian's redis-server) on 127.0.0.1, data under the cache folder.
#
#   deploy/local/redis.sh up | down | status
#
# Environment: REDIS_PORT (default 16379), STREAMSCRIBE_CACHE (default ~/.cache/streamscribe).
set -euo pipefail

REDIS_PORT="${REDIS_PORT:-16379}"
CACHE="${STREAMSCRIBE_CACHE:-$HOME/.cache/streamscribe}"
RUN="$CACHE/run/redis-$REDIS_PORT"

log() { echo "redis: $*" >&2; }

# Bounded: redis-cli waits forever on a port held by something that is not Redis.
ping() { timeout 2 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null; }

# shellcheck source=deploy/local/pidfile.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/pidfile.sh"
pid_alive() { pidfile_alive "$RUN/redis.pid" "redis-server.*:$REDIS_PORT"; }

up() {
  command -v redis-server >/dev/null || { log "redis-server missing: apt-get install redis-server"; exit 1; }
  if pid_alive && ping; then
    log "already running on 127.0.0.1:$REDIS_PORT"
    return 0
  fi
  if port_open; then
    log "port $REDIS_PORT is taken by another process; set REDIS_PORT or STREAMSCRIBE_REDIS_URL"
    exit 1
  fi
  mkdir -p "$RUN"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$RUN" --daemonize yes \
    --pidfile "$RUN/redis.pid" --logfile "$RUN/redis.log" --save "" --appendonly no
  for _ in $(seq 1 50); do
    if ping; then
      log "ready on 127.0.0.1:$REDIS_PORT"
      return 0
    fi
    sleep 0.2
  done
  log "not ready after 10 s; see $RUN/redis.log"
  exit 1
}

down() {
  if pid_alive; then
    kill "$(cat "$RUN/redis.pid")"
    for _ in $(seq 1 50); do pid_alive || break; sleep 0.2; done
    log "stopped"
  else
    log "not running"
  fi
  rm -f "$RUN/redis.pid"
}

status() {
  if ping; then echo "redis: running on 127.0.0.1:$REDIS_PORT"; else echo "redis: not running"; return 1; fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
