#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft, broker+controller on 127.0.0.1) from Maven Central.
#
#   deploy/local/kafka.sh fetch    resolve the broker jars with Maven into the cache (idempotent)
#   deploy/local/kafka.sh up       fetch, write config, format storage once, start, wait until ready
#   deploy/local/kafka.sh down     stop the broker started by `up` (by its PID)
#   deploy/local/kafka.sh status   print whether it runs and answers
#
# Environment: KAFKA_VERSION (default 4.1.1), KAFKA_PORT (19092; controller = port+1),
# STREAMSCRIBE_CACHE (default ~/.cache/streamscribe): jars under $CACHE/kafka-$VERSION-<pom>/libs,
# data and logs under $CACHE/run/kafka-$PORT. Needs Java 17+ and Maven.
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
KAFKA_PORT="${KAFKA_PORT:-19092}"
CONTROLLER_PORT="$((KAFKA_PORT + 1))"
CACHE="${STREAMSCRIBE_CACHE:-$HOME/.cache/streamscribe}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The jar folder is keyed by the pom's content, so editing the pom re-resolves once.
POM_HASH="$(sha256sum "$HERE/kafka-pom.xml" | cut -c1-8)"
LIBS="$CACHE/kafka-$KAFKA_VERSION-$POM_HASH/libs"
RUN="$CACHE/run/kafka-$KAFKA_PORT"
READY_TIMEOUT_S="${KAFKA_READY_TIMEOUT_S:-90}"

log() { echo "kafka: $*" >&2; }

fetch() {
  if [ -f "$LIBS/.complete" ]; then
    return 0
  fi
  command -v mvn >/dev/null || { log "Maven (mvn) is required: apt-get install maven"; exit 1; }
  command -v java >/dev/null || { log "Java 17+ is required: apt-get install openjdk-17-jre-headless"; exit 1; }
  log "resolving Apache Kafka $KAFKA_VERSION from Maven Central into $LIBS"
  mkdir -p "$LIBS"
  # Maven's own download cache in the project's cache too, not in ~/.m2.
  mvn -q -B -f "$HERE/kafka-pom.xml" -Dkafka.version="$KAFKA_VERSION" \
    -Dmaven.repo.local="$CACHE/m2" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$LIBS"
  touch "$LIBS/.complete"
}

# shellcheck source=deploy/local/pidfile.sh
. "$HERE/pidfile.sh"
pid_alive() { pidfile_alive "$RUN/kafka.pid" "kafka.Kafka $RUN/server.properties"; }

# The broker this `up` launched, if any. While it starts it is judged by its PID alone: until the
# forked shell reaches exec its command line is still bash's, so the pattern check above can call
# a broker that is starting dead (seen in CI on a loaded machine) and orphan it.
STARTED_PID=""

# process_alive PID: it exists and is not a zombie waiting to be reaped.
process_alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}

starting_alive() {
  if [ -n "$STARTED_PID" ]; then
    process_alive "$STARTED_PID"
  else
    pid_alive
  fi
}

# stop_pid PID: SIGTERM, up to 30 s for a clean shutdown, then SIGKILL.
stop_pid() {
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 1 60); do
    process_alive "$1" || return 0
    sleep 0.5
  done
  log "still running after 30 s, killing"
  kill -9 "$1" 2>/dev/null || true
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; }

write_config() {
  mkdir -p "$RUN/data"
  cat > "$RUN/server.properties" <<CONF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$RUN/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=12
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=12
group.initial.rebalance.delay.ms=0
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
auto.create.topics.enable=false
log.retention.check.interval.ms=60000
CONF
  cat > "$RUN/log4j2.yaml" <<CONF
Configuration:
  Appenders:
    RollingFile:
      name: File
      fileName: "$RUN/server.log"
      filePattern: "$RUN/server.log.%i"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
      Policies:
        SizeBasedTriggeringPolicy:
          size: 50 MB
      DefaultRolloverStrategy:
        max: 2
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: File
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: org.apache.kafka.controller
        level: WARN
CONF
}

format_storage() {
  if [ -f "$RUN/data/meta.properties" ]; then
    return 0
  fi
  local cluster_id
  cluster_id="$(java -cp "$LIBS/*" kafka.tools.StorageTool random-uuid 2>"$RUN/format.log" | tail -n 1)" \
    || { log "cannot run Kafka's StorageTool:"; cat "$RUN/format.log" >&2; exit 1; }
  log "formatting storage in $RUN/data (cluster $cluster_id)"
  java -cp "$LIBS/*" kafka.tools.StorageTool format -t "$cluster_id" \
    -c "$RUN/server.properties" --standalone >"$RUN/format.log" 2>&1 \
    || { cat "$RUN/format.log" >&2; exit 1; }
}

wait_ready() {
  local deadline=$((SECONDS + READY_TIMEOUT_S))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if ! starting_alive; then
      local status=""
      if [ -n "$STARTED_PID" ]; then
        status=" with status $(wait "$STARTED_PID" && echo 0 || echo $?)"
      fi
      log "broker exited during start-up$status; last lines of $RUN/server.log and stdout:"
      tail -n 20 "$RUN/server.log" "$RUN/stdout.log" >&2 2>/dev/null || true
      rm -f "$RUN/kafka.pid"
      exit 1
    fi
    # Ready = the broker answers a metadata request (not merely an open port).
    if port_open && python_ready; then
      return 0
    fi
    sleep 1
  done
  log "broker not ready after ${READY_TIMEOUT_S}s, stopping it; see $RUN/server.log"
  if [ -n "$STARTED_PID" ]; then
    stop_pid "$STARTED_PID"
    rm -f "$RUN/kafka.pid"
  else
    down
  fi
  exit 1
}

python_ready() {
  local py="${PYTHON:-$HERE/../../.venv/bin/python}"
  "$py" - "$KAFKA_PORT" <<'PY' 2>/dev/null
import sys
from confluent_kafka.admin import AdminClient
client = AdminClient({"bootstrap.servers": f"127.0.0.1:{sys.argv[1]}"})
metadata = client.list_topics(timeout=2)
sys.exit(0 if metadata.brokers else 1)
PY
}

up() {
  fetch
  if pid_alive; then
    log "already running (pid $(cat "$RUN/kafka.pid")) on 127.0.0.1:$KAFKA_PORT"
    wait_ready  # it may still be starting (another `up` began it)
    return 0
  fi
  if port_open; then
    log "port $KAFKA_PORT is taken by another process; set KAFKA_PORT or STREAMSCRIBE_KAFKA_BOOTSTRAP"
    exit 1
  fi
  write_config
  format_storage
  log "starting Apache Kafka $KAFKA_VERSION on 127.0.0.1:$KAFKA_PORT"
  KAFKA_HEAP="${KAFKA_HEAP:--Xms256m -Xmx1g}"
  # shellcheck disable=SC2086
  nohup java $KAFKA_HEAP -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$RUN/log4j2.yaml" -cp "$LIBS/*" kafka.Kafka \
    "$RUN/server.properties" >"$RUN/stdout.log" 2>&1 &
  STARTED_PID=$!
  echo "$STARTED_PID" >"$RUN/kafka.pid"
  wait_ready
  log "ready on 127.0.0.1:$KAFKA_PORT (pid $(cat "$RUN/kafka.pid"))"
}

down() {
  if ! pid_alive; then
    rm -f "$RUN/kafka.pid"
    log "not running"
    return 0
  fi
  stop_pid "$(cat "$RUN/kafka.pid")"
  rm -f "$RUN/kafka.pid"
  log "stopped"
}

status() {
  if pid_alive && port_open; then
    echo "kafka: running (pid $(cat "$RUN/kafka.pid")) on 127.0.0.1:$KAFKA_PORT"
  else
    echo "kafka: not running"
    return 1
  fi
}

case "${1:-}" in
  fetch) fetch ;;
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 fetch|up|down|status" >&2; exit 2 ;;
esac
