# devstack — the contributor's front door.
CARGO ?= cargo
.PHONY: build man test test-unit test-docker test-cluster test-online test-engines lint fmt kit kit-test e2e bench host ci clean-test-resources

build:
	$(CARGO) build --release

## Man pages of devstack and every command, from the release binary itself.
MAN_DIR ?= target/man
man:
	$(CARGO) run --release --quiet -- man --out-dir $(MAN_DIR)

## Every test tier; what cannot run here is reported loudly (see CONTRIBUTING.md).
## The test targets set nothing up on this machine: they use the Docker engine
## that answers (`make host` installs and starts one; `.ci/run` runs it first).
test:
	bash tests/run.sh

## One tier each (see CONTRIBUTING.md for what each needs and takes).
test-unit:
	DEVSTACK_TEST_TIERS=lint,unit bash tests/run.sh

test-docker:
	DEVSTACK_TEST_TIERS=docker bash tests/run.sh

test-cluster:
	bash kit/build.sh
	DEVSTACK_TEST_TIERS=cluster bash tests/run.sh

test-online:
	bash kit/build.sh
	DEVSTACK_TEST_TIERS=online bash tests/run.sh

## A current Docker engine (containerd image store, min API 1.44) beside the machine's own.
test-engines:
	bash kit/build.sh
	DEVSTACK_TEST_TIERS=engines bash tests/run.sh

## What killed test runs left behind (only test stacks' and the test mirror's labelled resources).
clean-test-resources:
	bash scripts/clean-test-resources.sh

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt

## Docker engine (installs docker.io and starts dockerd when none answers).
host:
	bash scripts/setup-docker.sh

## Offline kit: images and install artifacts built from package registries only.
kit: host
	bash kit/build.sh

kit-test: kit
	bash kit/test.sh

e2e:
	bash kit/build.sh
	DEVSTACK_TEST_TIERS=cluster bash tests/run.sh

bench:
	bash bench/run.sh
	bash bench/online.sh
	BENCH_PROVIDER=kind bash bench/online.sh
	bash bench/existing.sh
	bash bench/engines.sh
	bash bench/repository.sh
	bash bench/stopstart.sh
	bash bench/parameters.sh

ci:
	bash .ci/run
