# gangscale image: non-root, runs with a read-only root filesystem, has what every documented mode needs
# (`gangscale run`, `gangscale webhook` with --self-signed, `gangscale ungate`).
#
# Reproducible inputs: the base image by digest (the official python:3.11-slim index, every platform; refresh with
# scripts/refresh-base-image.sh), the dependencies from requirements.lock and the build backend from
# requirements-build.lock, both with sha256 hashes (refresh with scripts/lock-requirements.sh). Build and push:
# `make image IMAGE=<repository>` (scripts/build-image.sh).
ARG BASE_IMAGE=python:3.11-slim@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff

FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
RUN pip install --require-hashes -r requirements-build.lock
RUN pip install --require-hashes --prefix=/install -r requirements.lock
COPY pyproject.toml README.md ./
COPY gangscale gangscale
COPY cloud_adapters cloud_adapters
COPY benchmarks benchmarks
RUN pip install --no-deps --no-build-isolation --prefix=/install '.[webhook]'

FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 GANGSCALE_CONFIG_DIR=/app/config
COPY --from=build /install /usr/local
COPY config /app/config
USER 65532:65532
ENTRYPOINT ["gangscale"]
CMD ["run", "--config", "/etc/gangscale/config.yaml"]
