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

# The browser playground (playground/): the core's and the policy's decisions compiled to
# wasm32-unknown-unknown with wasm-bindgen, and a static page in $(PLAYGROUND_DIST). The
# wasm-bindgen CLI must be the version of the wasm-bindgen crate in Cargo.lock; it is
# installed once per version outside the repository.
PLAYGROUND_TARGET := wasm32-unknown-unknown
PLAYGROUND_PACKAGE := namespace-baseline-playground
PLAYGROUND_ARTIFACT := $(or $(CARGO_TARGET_DIR),target)/$(PLAYGROUND_TARGET)/release/namespace_baseline_playground.wasm
PLAYGROUND_DIST := playground/dist
PLAYGROUND_TESTS_OUT := $(or $(CARGO_TARGET_DIR),target)/playground-tests
WASM_BINDGEN_VERSION = $(shell awk '$$1 == "name" && $$3 == "\"wasm-bindgen\"" { getline; gsub(/"/, "", $$3); print $$3; exit }' Cargo.lock)
WASM_BINDGEN_ROOT = $(HOME)/.cache/namespace-baseline/tools/wasm-bindgen-$(WASM_BINDGEN_VERSION)
WASM_BINDGEN = $(WASM_BINDGEN_ROOT)/bin/wasm-bindgen

.PHONY: playground-target
playground-target:
	@rustup target list --installed | grep -qx '$(PLAYGROUND_TARGET)' || { \
		echo ">> installing the Rust $(PLAYGROUND_TARGET) target"; rustup target add $(PLAYGROUND_TARGET); }

# `--locked` first; wasm-bindgen-cli's own lockfile can name a crate version the registry no
# longer serves (yanked), and then only a fresh resolution of its dependencies installs it.
.PHONY: wasm-bindgen-cli
wasm-bindgen-cli:
	@test -n '$(WASM_BINDGEN_VERSION)' || { echo "!! no wasm-bindgen package in Cargo.lock" >&2; exit 1; }
	@if [ "$$('$(WASM_BINDGEN)' --version 2>/dev/null)" != 'wasm-bindgen $(WASM_BINDGEN_VERSION)' ]; then \
		echo ">> installing wasm-bindgen-cli $(WASM_BINDGEN_VERSION) into $(WASM_BINDGEN_ROOT)"; \
		$(CARGO) install wasm-bindgen-cli --version '$(WASM_BINDGEN_VERSION)' --locked --root '$(WASM_BINDGEN_ROOT)' || { \
			echo "!! wasm-bindgen-cli $(WASM_BINDGEN_VERSION) does not install --locked here; retrying with its dependencies resolved afresh" >&2; \
			$(CARGO) install wasm-bindgen-cli --version '$(WASM_BINDGEN_VERSION)' --root '$(WASM_BINDGEN_ROOT)'; }; \
	fi

.PHONY: playground
playground: playground-target wasm-bindgen-cli
	@command -v jq >/dev/null || { echo "jq not found: it writes the examples index (apt-get install jq)" >&2; exit 1; }
	@echo ">> building the playground for $(PLAYGROUND_TARGET)"
	$(CARGO) build -p $(PLAYGROUND_PACKAGE) --target $(PLAYGROUND_TARGET) --release --locked
	rm -rf $(PLAYGROUND_DIST)
	mkdir -p $(PLAYGROUND_DIST)
	'$(WASM_BINDGEN)' --target web --no-typescript --remove-name-section --remove-producers-section --out-dir $(PLAYGROUND_DIST)/pkg $(PLAYGROUND_ARTIFACT)
	cp playground/www/index.html playground/www/app.js playground/www/style.css $(PLAYGROUND_DIST)/
	jq -n '[inputs | {name: (input_filename | split("/") | last | rtrimstr(".json")), description, settings: (.settings // {}), baselines: (.baselines // []), hostError: (.hostError // null), request: (.request // {}), expect}]' \
		$(FIXTURES)/*.json > $(PLAYGROUND_DIST)/examples.json
	@echo ">> playground in $(PLAYGROUND_DIST): $$(jq length $(PLAYGROUND_DIST)/examples.json) examples, wasm $$(stat -c %s $(PLAYGROUND_DIST)/pkg/namespace_baseline_playground_bg.wasm) bytes"
	@echo ">> open it with: python3 -m http.server -d $(PLAYGROUND_DIST) 8000  (then http://localhost:8000)"

# The page in headless Chromium against the e2e runner's verdicts on policy.wasm.
CHROMIUM ?= /usr/bin/chromium
.PHONY: playground-tests
playground-tests: playground policy.wasm
	@test -x '$(CHROMIUM)' || { echo "!! Chromium not found at $(CHROMIUM): apt-get install -y chromium chromium-driver" >&2; exit 1; }
	mkdir -p $(PLAYGROUND_TESTS_OUT)
	$(CARGO) run -q -p namespace-baseline-e2e --bin e2e-runner --locked -- --wasm policy.wasm --fixtures $(FIXTURES) --report json > $(PLAYGROUND_TESTS_OUT)/e2e-report.json
	@[ playground/tests/node_modules/.package-lock.json -nt playground/tests/package-lock.json ] || (cd playground/tests && npm ci --no-audit --no-fund)
	node playground/tests/playground.test.mjs --dist $(PLAYGROUND_DIST) --report $(PLAYGROUND_TESTS_OUT)/e2e-report.json \
		--fixtures $(FIXTURES) --chromium '$(CHROMIUM)' --screenshot $(PLAYGROUND_TESTS_OUT)/playground.png

# docs/playground.png (README.md), taken by the browser test.
.PHONY: playground-screenshot
playground-screenshot: playground-tests
	cp $(PLAYGROUND_TESTS_OUT)/playground.png docs/playground.png

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
test: fmt-check lint unit-tests e2e-tests playground-tests cluster-tests manifests-check

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
	rm -rf $(PLAYGROUND_DIST)

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
