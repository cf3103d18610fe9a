# Namespace Baseline: `make test` is the whole test suite (README.md, .ci/run).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

CARGO ?= cargo
WASM_TARGET := wasm32-wasip1
POLICY_PACKAGE := namespace-baseline-policy
POLICY_ARTIFACT := $(or $(CARGO_TARGET_DIR),target)/$(WASM_TARGET)/policy/namespace_baseline_policy.wasm
FIXTURES := e2e-tests/fixtures
# Where the tools built once per version go (the scripts of e2e-tests/ and charts/ read the same
# variable).
NSB_CACHE_DIR ?= $(HOME)/.cache/namespace-baseline

.PHONY: all
all: policy.wasm

.PHONY: wasm-target
wasm-target:
	@rustup target list --installed | grep -x >/dev/null '$(WASM_TARGET)' || { \
		echo ">> installing the Rust $(WASM_TARGET) target"; rustup target add $(WASM_TARGET); }

# wasm-opt (binaryen 108, Debian's and Ubuntu's `binaryen` package; e2e-tests/setup.sh
# installs it) shrinks the module rustc writes by another ~15 % (-Oz), same behaviour: the
# size budget of e2e-tests/runner/tests/size.rs counts on it (BENCHMARKS.md, "The policy").
WASM_OPT ?= wasm-opt
WASM_OPT_FLAGS := -Oz --enable-bulk-memory --enable-sign-ext --enable-mutable-globals \
	--enable-nontrapping-float-to-int --enable-multivalue --enable-reference-types

.PHONY: wasm-opt
wasm-opt:
	@command -v '$(WASM_OPT)' >/dev/null || { echo "!! wasm-opt not found: apt-get install -y binaryen (e2e-tests/setup.sh installs it)" >&2; exit 1; }

# Cargo decides whether anything changed; never build the whole workspace for wasm.
.PHONY: policy.wasm
policy.wasm: wasm-target wasm-opt
	@echo ">> building the policy for $(WASM_TARGET)"
	$(CARGO) build -p $(POLICY_PACKAGE) --target $(WASM_TARGET) --profile policy --locked
	'$(WASM_OPT)' $(WASM_OPT_FLAGS) $(POLICY_ARTIFACT) -o policy.wasm
	@echo ">> policy.wasm: $$(stat -c %s policy.wasm) bytes ($$(stat -c %s $(POLICY_ARTIFACT)) from rustc, then wasm-opt -Oz)"

# Kubewarden's kwctl and policy-server 1.35.0, the one way every test and target finds them:
# KWCTL / POLICY_SERVER when set, else on PATH at 1.35.0, else unpacked (checksums checked) into
# $(NSB_CACHE_DIR)/kubewarden/1.35.0 from NSB_KUBEWARDEN_TOOLS (default ../shared/tools/kubewarden).
# `make kubewarden-tools` prints the directory holding both; KUBEWARDEN_DIR is the same, for
# recipes (evaluated only where used).
KUBEWARDEN_INSTALL := e2e-tests/kubewarden/install.sh
KUBEWARDEN_DIR = $(shell $(KUBEWARDEN_INSTALL))

.PHONY: kubewarden-tools
kubewarden-tools:
	@$(KUBEWARDEN_INSTALL)

# The policy as Kubewarden publishes it: kwctl annotate embeds metadata.yml (rules,
# contextAwareResources, hostCapabilities), without which policy-server refuses the module.
annotated-policy.wasm: policy.wasm metadata.yml
	kwctl="$$($(KUBEWARDEN_INSTALL) kwctl)"; \
	"$$kwctl" annotate policy.wasm --metadata-path metadata.yml --output-path annotated-policy.wasm
	@echo ">> annotated-policy.wasm: $$(stat -c %s annotated-policy.wasm) bytes (kwctl annotate with metadata.yml)"

# The browser playground (playground/): the core's and the policy's decisions compiled to
# wasm32-unknown-unknown with wasm-bindgen, and a static page in $(PLAYGROUND_DIST). The
# wasm-bindgen CLI must be the version of the wasm-bindgen crate in Cargo.lock; it is
# installed once per version outside the repository.
PLAYGROUND_TARGET := wasm32-unknown-unknown
PLAYGROUND_PACKAGE := namespace-baseline-playground
PLAYGROUND_ARTIFACT := $(or $(CARGO_TARGET_DIR),target)/$(PLAYGROUND_TARGET)/policy/namespace_baseline_playground.wasm
PLAYGROUND_DIST := playground/dist
PLAYGROUND_TESTS_OUT := $(or $(CARGO_TARGET_DIR),target)/playground-tests
WASM_BINDGEN_VERSION = $(shell awk '$$1 == "name" && $$3 == "\"wasm-bindgen\"" { getline; gsub(/"/, "", $$3); print $$3; exit }' Cargo.lock)
WASM_BINDGEN_ROOT = $(NSB_CACHE_DIR)/tools/wasm-bindgen-$(WASM_BINDGEN_VERSION)
WASM_BINDGEN = $(WASM_BINDGEN_ROOT)/bin/wasm-bindgen

.PHONY: playground-target
playground-target:
	@rustup target list --installed | grep -x >/dev/null '$(PLAYGROUND_TARGET)' || { \
		echo ">> installing the Rust $(PLAYGROUND_TARGET) target"; rustup target add $(PLAYGROUND_TARGET); }

# `cargo install` of a tool into its own directory under the tools cache: cargo's output goes
# to DIR/install.log, shown only when the install fails. (Among it, cargo's "be sure to add
# DIR/bin to your PATH", which is no instruction to the user: the Makefile calls each tool by
# its path.) $(call cargo_install,DIR,CRATE AND FLAGS)
define cargo_install
log='$(1)/install.log'; $(CARGO) install $(2) --root '$(1)' >"$$log" 2>&1 || { cat "$$log" >&2; exit 1; }
endef

# `--locked` first; wasm-bindgen-cli's own lockfile can name a crate version the registry does
# not serve (0.2.130's names webpki-roots 1.0.11), and then only a fresh resolution of its
# dependencies installs it: the first attempt's output goes to a log, shown only if both fail.
# flock: e2e-tests/prebuild.sh may be installing it in the background.
.PHONY: wasm-bindgen-cli
wasm-bindgen-cli:
	@test -n '$(WASM_BINDGEN_VERSION)' || { echo "!! no wasm-bindgen package in Cargo.lock" >&2; exit 1; }
	@mkdir -p '$(WASM_BINDGEN_ROOT)'; exec 9>'$(WASM_BINDGEN_ROOT).lock'; flock 9; \
	if [ "$$('$(WASM_BINDGEN)' --version 2>/dev/null)" != 'wasm-bindgen $(WASM_BINDGEN_VERSION)' ]; then \
		echo ">> installing wasm-bindgen-cli $(WASM_BINDGEN_VERSION) into $(WASM_BINDGEN_ROOT) (cold: about 3 minutes)"; \
		log='$(WASM_BINDGEN_ROOT)/install-locked.log'; \
		$(CARGO) install wasm-bindgen-cli --version '$(WASM_BINDGEN_VERSION)' --locked --root '$(WASM_BINDGEN_ROOT)' >"$$log" 2>&1 || { \
			echo ">> its own Cargo.lock does not resolve against this registry ($$(grep -m1 '^error' "$$log" | cut -c8-90)...); installing with its dependencies resolved afresh"; \
			$(CARGO) install wasm-bindgen-cli --version '$(WASM_BINDGEN_VERSION)' --root '$(WASM_BINDGEN_ROOT)' >'$(WASM_BINDGEN_ROOT)/install.log' 2>&1 || { \
				cat '$(WASM_BINDGEN_ROOT)/install.log' >&2; echo "!! the --locked attempt said:" >&2; cat "$$log" >&2; exit 1; }; }; \
	fi

.PHONY: playground
playground: playground-target wasm-bindgen-cli
	@echo ">> building the playground for $(PLAYGROUND_TARGET)"
	$(CARGO) build -p $(PLAYGROUND_PACKAGE) --target $(PLAYGROUND_TARGET) --profile policy --locked
	rm -rf $(PLAYGROUND_DIST)
	mkdir -p $(PLAYGROUND_DIST)
	'$(WASM_BINDGEN)' --target web --no-typescript --remove-name-section --remove-producers-section --out-dir $(PLAYGROUND_DIST)/pkg $(PLAYGROUND_ARTIFACT)
	cp playground/www/index.html playground/www/app.js playground/www/style.css $(PLAYGROUND_DIST)/
	$(CARGO) run -q -p namespace-baseline-formats --bin nsb-fixtures --locked -- examples $(FIXTURES) > $(PLAYGROUND_DIST)/examples.json
	@echo ">> playground in $(PLAYGROUND_DIST): $$(ls $(FIXTURES)/*.json | wc -l) examples, wasm $$(stat -c %s $(PLAYGROUND_DIST)/pkg/namespace_baseline_playground_bg.wasm) bytes"
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

# The node tests (e2e-tests/cluster/tests/node/) are built only with the cluster crate's
# `node` feature: linting with it keeps them compiling when the harness changes. Clippy's
# check build goes to its own directory, so that e2e-tests/prebuild.sh can run it at the
# lowest priority while the tests wait, without holding the lock of the tests' builds; the
# step itself then finds it done.
LINT_TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)/lint
.PHONY: lint
lint:
	CARGO_TARGET_DIR='$(LINT_TARGET_DIR)' $(CARGO) clippy --workspace --all-targets --features namespace-baseline-cluster-tests/node --locked -- -D warnings

# The cluster tests need a control plane: they run in `cluster-tests`.
.PHONY: unit-tests
unit-tests: policy.wasm
	$(CARGO) test --workspace --exclude namespace-baseline-cluster-tests --exclude namespace-baseline-registry-tests --locked

# The import graphs of the layered crates (the reconciler, core, the playground): each
# crate's layers top to bottom, each file's size in lines and its arrows (their
# tests/layers.rs, which `make unit-tests` runs: each fails naming the edge when files import
# each other in a circle or a layer imports from one above it).
.PHONY: layers
layers:
	$(CARGO) test -p namespace-baseline-reconciler -p namespace-baseline-core -p namespace-baseline-playground --test layers --locked -- --nocapture has_no_circle

# Every fixture through the built module in a real waPC host (wasmtime), which also records
# the host calls the policy makes for each as a kwctl replay session; then every fixture
# through kwctl 1.35 (e2e-tests/kwctl.bats), the context-aware ones against the annotated
# module with those sessions replayed. Fails on a failed or a skipped bats test.
KWCTL_SESSIONS := $(or $(CARGO_TARGET_DIR),target)/kwctl-sessions
.PHONY: e2e-tests
e2e-tests: policy.wasm annotated-policy.wasm
	@command -v bats >/dev/null || { echo "!! bats not found: run e2e-tests/setup.sh (make test does)" >&2; exit 1; }
	rm -rf '$(KWCTL_SESSIONS)'
	$(CARGO) run -p namespace-baseline-e2e --bin e2e-runner --locked -- --wasm policy.wasm --fixtures $(FIXTURES) --kwctl-sessions '$(KWCTL_SESSIONS)'
	POLICY_WASM=policy.wasm ANNOTATED_WASM=annotated-policy.wasm KWCTL_SESSIONS='$(KWCTL_SESSIONS)' \
		bats --tap e2e-tests/kwctl.bats | tee '$(KWCTL_SESSIONS)/kwctl.tap'
	@awk '/^ok / && / # skip/ {skipped++; next} /^ok / {passed++} /^not ok / {failed++} \
		END {printf ">> kwctl.bats: %d passed, %d failed, %d skipped\n", passed, failed, skipped; exit (failed + skipped > 0)}' '$(KWCTL_SESSIONS)/kwctl.tap'

# The reconciler against a real kube-apiserver + etcd built from Go modules (or the
# cluster of TEST_KUBECONFIG): CRD, RBAC, drift repair, leader election, request counts.
.PHONY: cluster-tests
cluster-tests:
	e2e-tests/cluster-tests.sh

# The cluster scenarios on other Kubernetes releases (docs/install.md's compatibility table):
# kube-apiserver and etcd of each e2e-tests/control-plane/compat/<release>/ module. Not in
# `make test` (a Go build and ~5 minutes per release). RELEASES="v1.30.14" picks some.
.PHONY: compat-tests
compat-tests:
	e2e-tests/compat-tests.sh $(RELEASES)

# --- The node: the wall on real packets (e2e-tests/node/, e2e-tests/cluster/tests/node/) ---
# A one-node Kubernetes in its own network namespace (kubelet, containerd + runc, CNI bridge,
# kube-proxy, kube-router's NetworkPolicy firewall, CoreDNS), every binary built from Go
# modules and every image offline; root and the packages of e2e-tests/node/install-deps.sh.
# node-build: the binaries and images only (cached in ~/.cache/namespace-baseline/).
.PHONY: node-build
node-build:
	e2e-tests/node/build.sh

# Wall, DNS door, drift on the wire, the chart's reconciler (needs `make image`), namespace
# deletion; FIGURE lines at the end.
.PHONY: node-tests
node-tests:
	e2e-tests/node-tests.sh

# Leader election under chaos (faults, leader kills, API server / etcd / proxy restarts),
# checked from the audit log: 3 minutes in CI; FULL=1 for the 10-minute, 1,000-namespace run.
.PHONY: soak
soak:
	FULL=$(FULL) e2e-tests/soak.sh

# cargo-fuzz targets for the policy, on a pinned nightly (a new nightly cannot break the build
# from one day to the next), with cargo-fuzz installed once per version outside the
# repository. `fuzz-build` only builds the targets (e2e-tests/prebuild.sh runs it while the
# tests wait).
FUZZ_SECONDS ?= 60
FUZZ_TOOLCHAIN := nightly-2026-10-29
CARGO_FUZZ_VERSION := 0.13.2
CARGO_FUZZ_ROOT = $(NSB_CACHE_DIR)/tools/cargo-fuzz-$(CARGO_FUZZ_VERSION)
FUZZ_ENV = PATH='$(CARGO_FUZZ_ROOT)/bin':"$$PATH" FUZZ_TOOLCHAIN='$(FUZZ_TOOLCHAIN)'

.PHONY: fuzz-tools
fuzz-tools:
	@rustup toolchain list | grep >/dev/null '^$(FUZZ_TOOLCHAIN)' || { echo ">> installing Rust $(FUZZ_TOOLCHAIN)"; rustup toolchain install $(FUZZ_TOOLCHAIN) --profile minimal; }
	@mkdir -p '$(CARGO_FUZZ_ROOT)'; exec 9>'$(CARGO_FUZZ_ROOT).lock'; flock 9; \
	[ -x '$(CARGO_FUZZ_ROOT)/bin/cargo-fuzz' ] || { echo ">> installing cargo-fuzz $(CARGO_FUZZ_VERSION) into $(CARGO_FUZZ_ROOT) (cold: about 1 minute)"; \
		$(call cargo_install,$(CARGO_FUZZ_ROOT),cargo-fuzz --version '$(CARGO_FUZZ_VERSION)' --locked); }

.PHONY: fuzz-build
fuzz-build: fuzz-tools
	$(FUZZ_ENV) fuzz/run.sh --build-only

.PHONY: fuzz
fuzz: fuzz-tools
	$(FUZZ_ENV) fuzz/run.sh $(FUZZ_SECONDS)

.PHONY: control-plane
control-plane:
	e2e-tests/control-plane/build.sh

# `make test` is the whole suite, its steps in this order: `setup` first checks (and, as root
# or with passwordless sudo, installs) every system package, tool and Rust target the tests
# need (e2e-tests/setup.sh), so a missing one stops it before the long build rather than
# after; then TEST_TARGETS. Clippy comes last: its check build runs in the background
# meanwhile (e2e-tests/prebuild.sh), in the time the tests leave the cores idle, instead of
# five minutes on the critical path.
TEST_TARGETS := fmt-check workflows-check unit-tests e2e-tests registry-tests playground-tests cluster-tests soak image-tests node-tests manifests-check alerts-check lint

.PHONY: setup
setup:
	e2e-tests/setup.sh

# The tools built once per version (Go binaries, cargo-installed tools) compile in the
# background at the lowest priority meanwhile (e2e-tests/prebuild.sh, log in
# $(PREBUILD_LOG)); it is stopped when the suite ends, whatever happens. PREBUILD_ARGS: .ci/run
# passes --with-ci-checks, so that what only it uses after make test (cargo-hakari, the MSRV
# check, the fuzz targets) builds in the same idle time; a plain `make test` builds none of it.
# Each step, setup included, prints its time and the disk left after it (CONTRIBUTING.md, "CI
# cold-run budget").
PREBUILD_LOG := $(or $(CARGO_TARGET_DIR),target)/prebuild.log
PREBUILD_ARGS ?=
.PHONY: test
test:
	@step_done() { echo ">> step $$1: $$(( $$(date +%s) - $$2 )) s; disk free: $$(df -h --output=avail . | tail -1 | tr -d ' ')"; }; \
	started=$$(date +%s); \
	$(MAKE) --no-print-directory setup; \
	step_done setup "$$started"; \
	mkdir -p '$(dir $(PREBUILD_LOG))'; \
	setsid e2e-tests/prebuild.sh $(PREBUILD_ARGS) >'$(PREBUILD_LOG)' 2>&1 & prebuild=$$!; \
	trap 'kill -TERM -- -'$$prebuild' 2>/dev/null || true; wait '$$prebuild' 2>/dev/null || true; sed "s/^/   /" "$(PREBUILD_LOG)" | grep "^   prebuild:" || true' EXIT; \
	echo ">> building the Go tools and cargo-installed tools in the background, at the lowest priority (log: $(PREBUILD_LOG))"; \
	for step in $(TEST_TARGETS); do \
		started=$$(date +%s); \
		$(MAKE) --no-print-directory $$step; \
		step_done "$$step" "$$started"; \
	done

# The workspace-hack package (e2e-tests/hack, generated by cargo-hakari from
# .config/hakari.toml): one feature set for the native crates the members share, so that no
# package selection (the reconciler alone, the cluster tests, the demo, the whole workspace)
# compiles tokio, hyper or kube's stack a second time. `make hack` after changing a
# dependency; CI runs `make hack-check`. cargo-hakari is installed once per version outside
# the repository.
HAKARI_VERSION := 0.9.39
HAKARI_ROOT = $(NSB_CACHE_DIR)/tools/cargo-hakari-$(HAKARI_VERSION)
HAKARI = $(HAKARI_ROOT)/bin/cargo-hakari

.PHONY: cargo-hakari
cargo-hakari:
	@mkdir -p '$(HAKARI_ROOT)'; exec 9>'$(HAKARI_ROOT).lock'; flock 9; \
	[ -x '$(HAKARI)' ] || { echo ">> installing cargo-hakari $(HAKARI_VERSION) into $(HAKARI_ROOT) (cold: about 2 minutes)"; \
		$(call cargo_install,$(HAKARI_ROOT),cargo-hakari --version '$(HAKARI_VERSION)' --locked); }

.PHONY: hack
hack: cargo-hakari
	'$(HAKARI)' hakari generate
	'$(HAKARI)' hakari manage-deps --yes

# Fails when e2e-tests/hack/Cargo.toml or a member's dependency on it is out of date.
.PHONY: hack-check
hack-check: cargo-hakari
	'$(HAKARI)' hakari generate --diff
	'$(HAKARI)' hakari manage-deps --dry-run

# The oldest Rust the crates users build accept (rust-version in Cargo.toml): core, the leader
# election, the policy (for wasm32-wasip1, as it ships), the reconciler, the playground, the
# demo. The test tools (the e2e runner) need 1.95, wasmtime 48's.
# Checked in CI (.ci/run).
MSRV := $(shell awk -F'"' '/^rust-version/ { print $$2; exit }' Cargo.toml)
# Its own directory, as clippy's: e2e-tests/prebuild.sh runs it while the tests wait.
MSRV_TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)/msrv
.PHONY: msrv
msrv:
	@rustup toolchain list | grep >/dev/null '^$(MSRV)' || { echo ">> installing Rust $(MSRV)"; rustup toolchain install $(MSRV) --profile minimal; }
	@rustup target list --toolchain $(MSRV) --installed | grep -x >/dev/null '$(WASM_TARGET)' || rustup target add --toolchain $(MSRV) $(WASM_TARGET)
	CARGO_TARGET_DIR='$(MSRV_TARGET_DIR)' $(CARGO) +$(MSRV) check --locked -p namespace-baseline-core -p namespace-baseline-leader -p namespace-baseline-reconciler -p namespace-baseline-playground
	CARGO_TARGET_DIR='$(MSRV_TARGET_DIR)' $(CARGO) +$(MSRV) check --locked -p $(POLICY_PACKAGE) --target $(WASM_TARGET)

# deploy/crd.yaml is generated from the Rust types; a reconciler test fails when stale.
.PHONY: crd
crd:
	$(CARGO) run -q -p namespace-baseline-reconciler --bin crdgen --locked > deploy/crd.yaml

# The floor the policy is benchmarked against: a no-op policy (e2e-tests/noop-policy), built
# exactly as policy.wasm is (never committed).
NOOP_POLICY_PACKAGE := namespace-baseline-noop-policy
NOOP_POLICY_ARTIFACT := $(or $(CARGO_TARGET_DIR),target)/$(WASM_TARGET)/policy/namespace_baseline_noop_policy.wasm
NOOP_POLICY_WASM := $(or $(CARGO_TARGET_DIR),target)/noop-policy.wasm

.PHONY: noop-policy
noop-policy: wasm-target wasm-opt
	$(CARGO) build -p $(NOOP_POLICY_PACKAGE) --target $(WASM_TARGET) --profile policy --locked
	'$(WASM_OPT)' $(WASM_OPT_FLAGS) $(NOOP_POLICY_ARTIFACT) -o $(NOOP_POLICY_WASM)

.PHONY: bench-policy
bench-policy: policy.wasm noop-policy
	NOOP_POLICY_WASM='$(abspath $(NOOP_POLICY_WASM))' $(CARGO) bench -p namespace-baseline-e2e --bench policy --locked

# The same request classes through `kwctl bench` (kwctl 1.35: the policy-server's evaluator,
# the cluster's objects read from the local control plane): e2e-tests/kwctl-bench.sh.
.PHONY: bench-kwctl
bench-kwctl: annotated-policy.wasm noop-policy
	NOOP_POLICY_WASM='$(abspath $(NOOP_POLICY_WASM))' e2e-tests/kwctl-bench.sh

.PHONY: bench
bench: bench-policy bench-kwctl

.PHONY: clean
clean:
	$(CARGO) clean
	rm -f policy.wasm annotated-policy.wasm
	rm -rf $(PLAYGROUND_DIST)

# The demo: builds what it needs (policy.wasm, the reconciler, the local control plane),
# shows the wall held on a real kube-apiserver, and stops everything it started.
# NODE=1: the node step instead (demo/node-demo.sh, root): real pods, a walled pod's connection
# refused, DNS through the door, a deleted wall back on the wire N ms later.
.PHONY: demo
demo:
	@if [[ "$(NODE)" == 1 ]]; then demo/node-demo.sh; else demo/demo.sh; fi

# The Helm chart: lint, and its default rendering equals deploy/*.yaml as objects (helm is
# built from the Go module proxy on first use).
.PHONY: chart-check
chart-check:
	charts/check.sh

# The chart's alert rules (templates/prometheusrule.yaml) as users' tools check them: promtool
# (built from the Prometheus Go module on first use, e2e-tests/alerts/build.sh) checks them and
# runs e2e-tests/alerts/tests.yaml (each alert fired and quiet); every metric they name must be
# one the reconciler exports (reconciler/tests/alert_metrics.rs).
.PHONY: alerts-check
alerts-check:
	e2e-tests/alerts/check.sh

# Every manifest of deploy/ and every chart rendering applied to the local control plane
# (or TEST_KUBECONFIG) with strict validation; runs chart-check first.
.PHONY: manifests-check
manifests-check:
	e2e-tests/manifests-check.sh

# --- Shipping: the reconciler image and the policy's OCI artifact -------------------------
# VERSION, the workspace version of Cargo.toml, is the image's tag, the policy's (vVERSION)
# and the chart's appVersion; tests/image.rs checks that they agree. REGISTRY is where
# `make push` publishes (e.g. registry.example.com/team); without it the names are the
# project's own (those of deploy/ and the chart).
VERSION := $(shell sed -n '/^\[workspace\.package\]/,/^\[/ s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
REGISTRY ?=
IMAGE_REPOSITORY ?= $(or $(REGISTRY),ghcr.io/hedronite)/namespace-baseline-reconciler
IMAGE ?= $(IMAGE_REPOSITORY):$(VERSION)
POLICY_REPOSITORY ?= $(or $(REGISTRY),ghcr.io/hedronite)/policies/namespace-baseline
POLICY_REF ?= $(POLICY_REPOSITORY):v$(VERSION)
# linux/amd64 and/or linux/arm64 (arm64: cargo-zigbuild, installed on first use).
PLATFORMS ?= linux/amd64

.PHONY: image-ref
image-ref:
	@echo '$(IMAGE)'
	@echo '$(POLICY_REF)'

# The static (musl) reconciler of each platform, staged in target/image/linux/<arch>/.
.PHONY: reconciler-static
reconciler-static:
	e2e-tests/image/build.sh binaries --platforms '$(PLATFORMS)'

# Containerfile with podman, buildah or docker (CONTAINER_TOOL=...); leaves
# target/image/reconciler.oci.tar and (one platform) target/image/reconciler.docker.tar.
.PHONY: image
image: reconciler-static
	e2e-tests/image/build.sh image --platforms '$(PLATFORMS)' --image '$(IMAGE)'

# Publishes the image (`make image` first: `make image push REGISTRY=...`) and the policy,
# annotated and pushed with kwctl only (policy-server refuses the plain module), and prints
# both digests with the helm command that pins them. `make push-policy REGISTRY=...`: the
# policy alone. TLS_VERIFY=false: a registry over plain HTTP. SOURCES=sources.yaml: kwctl's
# sources file for the policy (a registry with its own CA: source_authorities).
.PHONY: push push-policy
push push-policy:
	@test -n '$(REGISTRY)' || { echo "!! make $@ needs REGISTRY, e.g. make image push REGISTRY=registry.example.com/team" >&2; exit 1; }
	@$(KUBEWARDEN_INSTALL) kwctl >/dev/null || { echo "!! make $@ publishes the policy with kwctl annotate + kwctl push only, since policy-server refuses a module without kwctl's annotation (\"Policy is missing protocol version\"). Nothing was pushed." >&2; exit 1; }
	$(MAKE) --no-print-directory annotated-policy.wasm
	e2e-tests/image/push.sh $(if $(filter push,$@),--image '$(IMAGE)' --platforms '$(PLATFORMS)') --policy '$(POLICY_REF)' --kwctl "$$($(KUBEWARDEN_INSTALL) kwctl)"

# policy.wasm through a real registry (the CNCF distribution registry, built from Go modules):
# pushed with oras as Kubewarden stores policies, pulled back by digest with oci-client.
.PHONY: registry-tests
registry-tests: policy.wasm
	e2e-tests/registry/test.sh

# The image through the registry (pushed, pulled by digest, config checked, rebuilt to the
# same digest), then run as a kubelet runs it against the local control plane.
.PHONY: image-tests
image-tests: image
	e2e-tests/image/test.sh

# actionlint (built from Go modules) on .github/workflows/.
.PHONY: workflows-check
workflows-check:
	e2e-tests/workflows/check.sh
