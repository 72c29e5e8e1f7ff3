#!/usr/bin/env bash
# Build the sidecar image with buildah, from the Dockerfile as users build it.
#
#   scripts/image/build.sh [TAG]        # default TAG: localhost/priority-pubsub:ci
#
# Base image: the Dockerfile's default (python:3.11-slim-bookworm) when a registry answers;
# otherwise (no registry reachable, as on the CI machine) the same Debian release built from
# Debian packages by scripts/image/base.sh, passed as --build-arg PYTHON_IMAGE. Prints
# "IMAGE=<tag>" and "BASE=<image>" on stdout. Needs root and buildah.
set -euo pipefail
cd "$(dirname "$0")/../.."

TAG="${1:-localhost/priority-pubsub:ci}"
DEFAULT_BASE="$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile)"

if [ -n "${PYTHON_IMAGE:-}" ]; then
  base="$PYTHON_IMAGE"
elif timeout 120 buildah pull --quiet "docker.io/library/$DEFAULT_BASE" >/dev/null 2>&1; then
  base="$DEFAULT_BASE"
else
  echo "build: $DEFAULT_BASE cannot be pulled (no registry reachable): building the base from Debian packages" >&2
  base="$(scripts/image/base.sh)"
fi

args=(--format docker --layers=false --network host --build-arg "PYTHON_IMAGE=$base" -t "$TAG")
# chroot isolation needs no OCI runtime or cgroups (crun refuses hybrid cgroup hosts).
args+=(--isolation "${BUILDAH_ISOLATION:-chroot}")
# The host's CA bundle and pip settings for the RUN steps only (an intercepting proxy's CA,
# a local index); nothing of them is left in the image.
[ -d /etc/ssl/certs ] && args+=(-v /etc/ssl/certs:/etc/ssl/certs:ro)
[ -f /etc/pip.conf ] && args+=(-v /etc/pip.conf:/etc/pip.conf:ro)
[ -n "${EXTRAS:-}" ] && args+=(--build-arg "EXTRAS=$EXTRAS")

echo "build: buildah bud ${args[*]} ." >&2
buildah bud "${args[@]}" . >&2
echo "IMAGE=$TAG"
echo "BASE=$base"
