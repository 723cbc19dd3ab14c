#!/usr/bin/env sh
# Build the gangscale image from the Dockerfile and, with PUSH=1, push it.
#   IMAGE  repository (default ghcr.io/gangscale/gangscale, the Helm chart's default image.repository)
#   TAG    tag (default: the package version, which is the chart's appVersion and so its default image.tag)
#   PLATFORMS  e.g. linux/amd64,linux/arm64 (default: the builder's own); several need PUSH=1 (docker buildx)
# Prints the pushed image's digest, for the chart's image.digest.
set -eu
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-ghcr.io/gangscale/gangscale}"
TAG="${TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)}"
set -- --tag "$IMAGE:$TAG" --file Dockerfile
[ -n "${PLATFORMS:-}" ] && set -- "$@" --platform "$PLATFORMS"
if [ "${PUSH:-0}" = 1 ]; then
  docker buildx build "$@" --push --metadata-file .image-metadata.json .
  sed -n 's/.*"containerimage.digest": *"\([^"]*\)".*/image.digest: \1/p' .image-metadata.json
  rm -f .image-metadata.json
else
  docker buildx build "$@" --load .
fi
echo "built $IMAGE:$TAG"
