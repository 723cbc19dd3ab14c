# gangscale controller image: non-root, runs with a read-only root filesystem.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gangscale gangscale
COPY cloud_adapters cloud_adapters
COPY benchmarks benchmarks
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 GANGSCALE_CONFIG_DIR=/app/config
COPY --from=build /install /usr/local
COPY config /app/config
USER 65532:65532
ENTRYPOINT ["gangscale"]
CMD ["run", "--config", "/etc/gangscale/config.yaml"]
