// Command registry is the CNCF distribution registry (github.com/distribution/distribution/v3,
// the version pinned in ../../go.mod) with only the filesystem and in-memory storage drivers:
// the tests need nothing else, and leaving out the cloud drivers (S3, GCS, Azure) and their
// SDKs makes the cold build several times shorter.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() {
	// RootCmd exits non-zero itself when serving fails.
	_ = registry.RootCmd.Execute()
}
