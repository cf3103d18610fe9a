# Namespace Baseline: `make test` is the whole test suite (README.md, .ci/run).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

CARGO ?= cargo
WASM_TARGET := wasm32-wasip1
POLICY_PACKAGE := namespace-baseline-policy
POLICY_ARTIFACT := $(or $(CARGO_TARGET_DIR),target)/$(WASM_TARGET)/release/namespace_baseline_policy.wasm
FIXTURES := e2e-tests/fixtures

.PHONY: all
all: policy.wasm

.PHONY: wasm-target
wasm-target:
	@rustup target list --installed | grep -qx '$(WASM_TARGET)' || { \
		echo ">> installing the Rust $(WASM_TARGET) target"; rustup target add $(WASM_TARGET); }

# Cargo decides whether anything changed; never build the whole workspace for wasm.
.PHONY: policy.wasm
policy.wasm: wasm-target
	@echo ">> building the policy for $(WASM_TARGET)"
	$(CARGO) build -p $(POLICY_PACKAGE) --target $(WASM_TARGET) --release --locked
	cp $(POLICY_ARTIFACT) policy.wasm
	@echo ">> policy.wasm: $$(stat -c %s policy.wasm) bytes"

annotated-policy.wasm: policy.wasm metadata.yml
	@command -v kwctl >/dev/null || { echo "kwctl not found: install it from https://github.com/kubewarden/kwctl to annotate the policy" >&2; exit 1; }
	kwctl annotate policy.wasm --metadata-path metadata.yml --output-path annotated-policy.wasm

.PHONY: fmt
fmt:
	$(CARGO) fmt --all

.PHONY: fmt-check
fmt-check:
	$(CARGO) fmt --all -- --check

.PHONY: lint
lint:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

# The cluster tests need a control plane: they run in `cluster-tests`.
.PHONY: unit-tests
unit-tests: policy.wasm
	$(CARGO) test --workspace --exclude namespace-baseline-cluster-tests --locked

# Every fixture through the built module in a real waPC host (wasmtime), then through
# kwctl when it is installed.
.PHONY: e2e-tests
e2e-tests: policy.wasm
	$(CARGO) run -p namespace-baseline-e2e --bin e2e-runner --locked -- --wasm policy.wasm --fixtures $(FIXTURES)
	@if command -v bats >/dev/null; then POLICY_WASM=policy.wasm bats e2e-tests/kwctl.bats; \
	else echo "!! bats not found: e2e-tests/kwctl.bats not run (install bats)"; fi

# The reconciler against a real kube-apiserver + etcd built from Go modules (or the
# cluster of TEST_KUBECONFIG): CRD, RBAC, drift repair, leader election, request counts.
.PHONY: cluster-tests
cluster-tests:
	e2e-tests/cluster-tests.sh

# cargo-fuzz targets for the policy (nightly + cargo-fuzz; .ci/run installs them).
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz:
	fuzz/run.sh $(FUZZ_SECONDS)

.PHONY: control-plane
control-plane:
	e2e-tests/control-plane/build.sh

.PHONY: test
test: fmt-check lint unit-tests e2e-tests cluster-tests manifests-check

# deploy/crd.yaml is generated from the Rust types; a reconciler test fails when stale.
.PHONY: crd
crd:
	$(CARGO) run -q -p namespace-baseline-reconciler --bin crdgen --locked > deploy/crd.yaml

.PHONY: bench-policy
bench-policy: policy.wasm
	$(CARGO) bench -p namespace-baseline-e2e --bench policy --locked

.PHONY: bench
bench: bench-policy

.PHONY: clean
clean:
	$(CARGO) clean
	rm -f policy.wasm annotated-policy.wasm

# The demo: builds what it needs (policy.wasm, the reconciler, the local control plane),
# shows the wall held on a real kube-apiserver, and stops everything it started.
.PHONY: demo
demo:
	demo/demo.sh

# The Helm chart: lint, and its default rendering equals deploy/*.yaml as objects (helm is
# built from the Go module proxy on first use).
.PHONY: chart-check
chart-check:
	charts/check.sh

# Every manifest of deploy/ and every chart rendering applied to the local control plane
# (or TEST_KUBECONFIG) with strict validation; runs chart-check first.
.PHONY: manifests-check
manifests-check:
	e2e-tests/manifests-check.sh
