#!/usr/bin/env bash
# A local stand-in for the Dockerfile's default base image, built from Debian packages.
#
# The default base (python:3.11-slim-bookworm) needs a container registry; where none is
# reachable (this CI machine), the same Debian release is debootstrapped with Debian's
# python3 (3.11 on bookworm) and venv, and imported into buildah's local storage as
# $BASE_IMAGE. The root filesystem tarball is cached under $CACHE_DIR keyed by release and
# package list, so later runs only re-import it (seconds).
#
#   scripts/image/base.sh            # prints the image name to use as --build-arg PYTHON_IMAGE
#
# Needs root, debootstrap and buildah (apt-get install debootstrap buildah).
set -euo pipefail

RELEASE="${RELEASE:-bookworm}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
# python-is-python3: the Dockerfile (and its HEALTHCHECK) call `python`, as the official
# images provide it. passwd (useradd) is in minbase already.
PACKAGES="python3,python3-venv,python-is-python3,ca-certificates"
CACHE_DIR="${CACHE_DIR:-/var/cache/priority-pubsub}"
KEY="$(printf '%s %s' "$RELEASE" "$PACKAGES" | sha256sum | cut -c1-12)"
TARBALL="$CACHE_DIR/debian-$RELEASE-python-$KEY.tar"
BASE_IMAGE="${BASE_IMAGE:-localhost/priority-pubsub-base:$RELEASE-$KEY}"

log() { echo "base: $*" >&2; }

if buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  log "$BASE_IMAGE already in local storage"
  echo "$BASE_IMAGE"
  exit 0
fi

mkdir -p "$CACHE_DIR"
if [ ! -s "$TARBALL" ]; then
  work="$(mktemp -d "$CACHE_DIR/rootfs.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  log "debootstrap $RELEASE (+ $PACKAGES) from $MIRROR: a few minutes, once"
  debootstrap --variant=minbase --include="$PACKAGES" "$RELEASE" "$work/rootfs" "$MIRROR" \
    > "$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  # What the slim images also drop: apt lists and caches, docs, man pages.
  rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/*.bin \
         "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/usr/share/doc/* \
         "$work"/rootfs/usr/share/man/* "$work"/rootfs/usr/share/locale/*
  tar --numeric-owner -C "$work/rootfs" -cf "$TARBALL.part" .
  mv "$TARBALL.part" "$TARBALL"
fi

log "importing $TARBALL as $BASE_IMAGE"
container="$(buildah from scratch)"
buildah add --quiet "$container" "$TARBALL" / >/dev/null
buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 --cmd '["python3"]' \
  --label "org.opencontainers.image.description=debootstrap $RELEASE + Debian python3, venv" \
  "$container"
buildah commit --quiet --rm "$container" "$BASE_IMAGE" >/dev/null
echo "$BASE_IMAGE"
