# Container image and pinned dependencies (docs: config/helm/gangscale/README.md "The image").
IMAGE ?= ghcr.io/gangscale/gangscale
TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
PUSH ?= 0
PLATFORMS ?=

.PHONY: image lock base-image chart-values lint

image:  ## build the image (PUSH=1 also pushes it and prints its digest)
	IMAGE=$(IMAGE) TAG=$(TAG) PUSH=$(PUSH) PLATFORMS=$(PLATFORMS) scripts/build-image.sh

lock:  ## refresh requirements.lock and requirements-build.lock from PyPI, with hashes
	scripts/lock-requirements.sh

base-image:  ## pin the Dockerfile's BASE_IMAGE to the current digest of python:3.11-slim
	scripts/refresh-base-image.sh

chart-values:  ## regenerate the chart README's values table
	python scripts/chart-values-table.py

lint:  ## ruff check, ruff format --check and mypy over the package, the adapters and the benchmarks (as .ci/run)
	ruff check gangscale cloud_adapters benchmarks
	ruff format --check gangscale cloud_adapters benchmarks
	mypy gangscale cloud_adapters benchmarks
