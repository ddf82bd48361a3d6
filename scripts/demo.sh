#!/usr/bin/env bash
# `make demo`: start Kafka and Redis, apply the topics, then run the main job end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
STREAMSCRIBE=.venv/bin/streamscribe

bash deploy/local/kafka.sh up
bash deploy/local/redis.sh up
$STREAMSCRIBE topics apply
$STREAMSCRIBE topics list || true
echo
echo "demo: Kafka ($(bash deploy/local/kafka.sh status)) and Redis are up, topics applied."
echo "demo: the ASR worker is not built yet (issue 4); this demo stops here."
echo "demo: stop the services with 'make infra-down'."
