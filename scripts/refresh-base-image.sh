#!/usr/bin/env sh
# Pin the Dockerfile's BASE_IMAGE to the current digest of a tag (default python:3.11-slim): the multi-platform
# index digest the registry serves now. Needs `docker buildx` (or set RESOLVE to another command printing the digest,
# e.g. RESOLVE="crane digest").
set -eu
cd "$(dirname "$0")/.."
TAG="${1:-python:3.11-slim}"
if [ -n "${RESOLVE:-}" ]; then
  DIGEST="$($RESOLVE "$TAG")"
else
  DIGEST="$(docker buildx imagetools inspect "$TAG" --format '{{json .Manifest.Digest}}' | tr -d '"')"
fi
case "$DIGEST" in sha256:*) ;; *) echo "refresh-base-image: no digest for $TAG: '$DIGEST'" >&2; exit 1 ;; esac
sed -i.bak "s|^ARG BASE_IMAGE=.*|ARG BASE_IMAGE=$TAG@$DIGEST|" Dockerfile && rm -f Dockerfile.bak
grep '^ARG BASE_IMAGE=' Dockerfile
