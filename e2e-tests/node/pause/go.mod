// The pod sandbox process of the test node's pods (containerd's sandbox_image): holds the
// pod's namespaces, reaps orphans, exits on SIGINT/SIGTERM. Standard library only.
module github.com/namespace-baseline/e2e-tests/node/pause

go 1.26.0
