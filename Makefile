# Thin by design: every target calls go or a script under scripts/.
# `make help` lists them.
.DEFAULT_GOAL := help
SHELL := /bin/bash

.PHONY: help build test test-unit bench lint demo demo-host demo-rollout demo-update-operator demo-eds demo-swarm generate image vm-test cluster-up cluster-down

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-21s %s\n", $$1, $$2}'

build: ## build the static binary into bin/slipway (version from git)
	@scripts/build

test: ## the whole test suite: installs what it needs, then unit, host, control-plane, cluster and VM tests
	@scripts/test

test-unit: ## only the tests that need no control plane or VM (go test -short)
	@go test -short ./...

bench: ## benchmarks: staging vs the k3os pipeline, the controller's view comparisons per pass, the 100-node rollouts, slipway vs system-upgrade-controller (100 nodes, then 1,000 with stand-in agents), the agents' memory, eds vs the DaemonSet controller, swarm's assign and a 1,000-worker pool end to end
	@scripts/bench
	@scripts/bench-rollout
	@scripts/bench-rollout-staged
	@scripts/bench-suc
	@scripts/bench-scale
	@scripts/bench-update-operator
	@scripts/bench-swarm

.PHONY: chaos
chaos: ## the systems under faults drawn from seeds, the invariant monitor watching: CHAOS_SEEDS (2), CHAOS_DURATION (45s), SYSTEM or CHAOS_SYSTEM (k3os, update-operator, eds, swarm; default all), then every named schedule of those systems (CHAOS_NAMED=0 skips them); a failing run prints its replay command
	@SYSTEM="$(SYSTEM)" scripts/chaos

lint: ## gofmt, go vet and staticcheck (installed from the Go module proxy)
	@scripts/lint

demo: ## the main job: a real upgrade on one node, a rollout through a simulated cluster, then each system's act, and a summary
	@scripts/demo-all

demo-host: ## only the one-node act: install v1, upgrade to v2 from a local mirror (build/demo)
	@scripts/demo

demo-rollout: ## only the cluster act: 10 fake nodes, the manifest applied, `kubectl patch upchan` to latest, watched until all run v2
	@scripts/demo-rollout

demo-update-operator: ## only the update operator's act: 6 fake nodes, the manifest applied, v2 published and rolled 2 at a time
	@scripts/demo-update-operator

demo-eds: ## only the ExtendedDaemonSet act: a canary validated with kubectl eds, a crash-looping canary rolled back, a bad release stopped by its metrics (Prometheus)
	@scripts/demo-eds

demo-swarm: ## only the swarm act: `slipway swarm assign` examples, then a StatefulSet of workers scaled live
	@scripts/demo-swarm

image: ## build the bootable test OS images and release mirrors (v1, v2, a broken v3) under build/images
	@scripts/image

vm-test: ## boot the test images under qemu: upgrade, reboot, fall back from a broken version
	@scripts/vm-test

.PHONY: image-oci
image-oci: ## slipway's container image as a multi-arch (amd64, arm64) OCI archive, without Docker: build/slipway-oci.tar
	@scripts/image-oci

.PHONY: vm-node-test
vm-node-test: ## a VM that is a real Kubernetes node (kubelet, containerd) upgraded by the agent; power resets during ops upgrade
	@scripts/vm-node-test

generate: ## regenerate the wrangler code and CRD YAML (CI fails when it is out of date)
	@scripts/generate

cluster-up: ## start the simulated cluster (scripts/cluster up)
	@scripts/cluster up

cluster-down: ## stop the simulated cluster
	@scripts/cluster down
