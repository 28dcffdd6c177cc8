# Thin wrapper over hack/ scripts and CMake; every target says what it does with `make help`.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= 2

REGISTRY ?=
TAG ?= dev
ARM64_BUILD ?=

.PHONY: help deps testbin build images test unit e2e demo demo-down fuzz bench bench-daemons format format-check crds cluster-up cluster-down clean

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

deps: ## install the Debian packages (idempotent)
	hack/deps.sh

testbin: deps ## build etcd, kube-apiserver, kubectl, cosign, crane, prometheus, promtool, ... from Go modules (cached in ~/.cache/tkm)
	hack/testbin/build.sh

build: deps ## configure and build everything into $(BUILD)/
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)
	ninja -C $(BUILD) -j $(JOBS)

images: build testbin ## tkm's images (tkm-csi, and tkm-agent/-controller/tkmctl when built) pushed to REGISTRY (default: the local one), TAG (dev); ARM64_BUILD=build-arm64: amd64+arm64 index
	hack/images/all.sh $(BUILD) "$(REGISTRY)" $(TAG) $(ARM64_BUILD)

test: ## all tests: build, unit, e2e (real control plane), sanitizers, valgrind, fuzz; ends with "N passed, N failed"
	hack/test.sh

unit: build ## unit tests only
	cd $(BUILD) && ctest -L unit -j $(JOBS) --output-on-failure

e2e: build testbin ## end-to-end tests against a real kube-apiserver, etcd, registry
	cd $(BUILD) && ctest -L e2e --output-on-failure

demo: ## the whole thing on a local control plane and a real node (hack/demo.sh): a signed cache Ready, a pod using it
	hack/demo.sh

demo-down: ## stop what `make demo` started (node, control plane) and remove its host dirs; idempotent
	hack/demo.sh down

fuzz: deps ## build the libFuzzer targets with clang and run each for TKM_FUZZ_SECONDS (default 20)
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DTKM_FUZZ=ON -DTKM_E2E=OFF -DTKM_FUZZ_SECONDS=$${TKM_FUZZ_SECONDS:-20}
	ninja -C build-fuzz -j $(JOBS)
	cd build-fuzz && ctest -L fuzz --output-on-failure

bench: build testbin ## benchmarks, each side by side with its baseline (numbers in bench/README.md)
	hack/cluster.sh up
	rc=0; TKM_BUILD_DIR=$(CURDIR)/$(BUILD) bash bench/run-watch.sh || rc=$$?; \
	  bash bench/pull_extract.sh $(CURDIR)/$(BUILD) 200 5 || rc=$$?; exit $$rc

bench-daemons: build testbin ## tkm-agent and tkm-controller against GKM's agent and operator (bench/README.md)
	rc=0; TKM_BUILD_DIR=$(CURDIR)/$(BUILD) bash bench/agent.sh || rc=$$?; \
	  TKM_BUILD_DIR=$(CURDIR)/$(BUILD) bash bench/controller.sh small || rc=$$?; exit $$rc

format: ## clang-format every C file in place
	git ls-files '*.c' '*.h' | xargs clang-format -i

format-check: ## fail if any C file is not clang-formatted
	hack/lint.sh format

crds: ## regenerate crds/ from hack/gen-crds.sh
	hack/gen-crds.sh

cluster-up: ## start the local control plane and registry (hack/cluster.sh up)
	hack/cluster.sh up

cluster-down: ## stop it
	hack/cluster.sh down

clean: ## remove build directories (not the Go-built binaries cache)
	rm -rf build build-debug build-release build-asan build-valgrind build-fuzz
