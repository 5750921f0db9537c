# Toolroom's entry points. Each target does its own set-up (see scripts/), so on a fresh clone
# `make run` and `make test` are all there is to know.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PORT ?= 8000
PYTEST_ARGS ?=
export PORT PYTEST_ARGS

.PHONY: help run test lint typecheck pytest pytest-fast stack-test images check-deploy clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

run: ## Set up .venv, migrate, demo data, print the admin sign-in, serve on 127.0.0.1:8000 (PORT=)
	@bash scripts/run-quickstart

test: ## Set up services and .venv, then ruff, ruff format, mypy, import contracts, pytest
	@bash scripts/check all

lint: ## ruff check, ruff format --check, lint-imports
	@bash scripts/check lint

typecheck: ## mypy (strict, with django-stubs)
	@bash scripts/check typecheck

pytest: ## Only the test suite (with its set-up); PYTEST_ARGS="-k name -x" narrows it
	@bash scripts/check pytest

pytest-fast: ## pytest without the slow tiers (pyproject.toml's markers; docs/development.md)
	@bash scripts/check pytest-fast

stack-test: ## Only the production stack tier: make images, then docker compose up to a tool call
	@bash scripts/check stack

images: ## Build the stack's images from Debian's packages, no registry (deploy/local-images.env)
	@bash scripts/stack-images

check-deploy: ## manage.py check --deploy with the production profile
	@bash scripts/check-deploy

clean: ## Remove .venv and caches (keeps var/: the quickstart database, keys and admin password)
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache .import_linter_cache .hypothesis \
		build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
