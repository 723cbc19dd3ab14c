#!/usr/bin/env sh
# Refresh the image's pinned dependencies from PyPI, with every distribution's sha256:
#   requirements.lock        the package's runtime dependencies and the `webhook` extra (cryptography)
#   requirements-build.lock  the build backend (setuptools), so the image builds the package offline of PyPI's latest
# Run it with the Python the image uses (3.11, as the Dockerfile's BASE_IMAGE) after a dependency in pyproject.toml
# changes; the Dockerfile installs with `pip install --require-hashes`, so anything unlocked fails the build.
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
TOOLS="$(mktemp -d)"
trap 'rm -rf "$TOOLS"' EXIT
export PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT=  # PyPI's files and hashes, not a local mirror's
"$PYTHON" -m venv "$TOOLS/venv"
"$TOOLS/venv/bin/pip" install --quiet --index-url https://pypi.org/simple 'pip-tools>=7.4,<8'
COMPILE="$TOOLS/venv/bin/pip-compile --quiet --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links
  --index-url https://pypi.org/simple --allow-unsafe"
$COMPILE --extra webhook --output-file requirements.lock pyproject.toml
$COMPILE --only-build-deps --all-build-deps --output-file requirements-build.lock pyproject.toml
