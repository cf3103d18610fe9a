//! The registry tests' harness: the environment `e2e-tests/registry/test.sh` sets, and an
//! oci-client [`Client`] configured as Kubewarden's policy-fetcher configures it for a
//! registry listed as insecure (plain HTTP; the local registry serves no TLS).

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::{Client, Reference};

/// Kubewarden's media types (policy-fetcher: `manifest::WASM_CONFIG_MEDIA_TYPE` and
/// `manifest::WASM_LAYER_MEDIA_TYPE` of oci-client, which it pushes and pulls with), spelt out
/// here so that a change on either side fails the tests.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v1+json";
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The config blob Kubewarden pushes: an empty JSON object.
pub const WASM_CONFIG: &[u8] = b"{}";
/// What `OciImageManifest::build` (Kubewarden's push) declares.
pub const OCI_IMAGE_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// A variable of the test environment; its absence fails the test (no silent skip).
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run these tests with e2e-tests/registry/test.sh (make registry-tests), \
             which starts a registry and pushes the policy to it"
        )
    })
}

/// The reference of the pushed policy, by digest (`NSB_POLICY_REF`).
pub fn policy_ref() -> Reference {
    let text = env("NSB_POLICY_REF");
    let reference: Reference = text
        .parse()
        .unwrap_or_else(|e| panic!("NSB_POLICY_REF {text:?}: {e}"));
    assert!(
        reference.digest().is_some(),
        "NSB_POLICY_REF {text:?} must name the artifact by digest"
    );
    reference
}

/// The bytes of the module that was pushed (`NSB_POLICY_WASM`).
pub fn policy_wasm() -> Vec<u8> {
    let path = env("NSB_POLICY_WASM");
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// A client speaking plain HTTP, as policy-fetcher's for an insecure source. rustls needs a
/// crypto provider even then: ring, installed once per process.
pub fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    })
}

/// The sha256 digest (`sha256:<hex>`) of some bytes, as a registry computes it.
pub fn sha256(bytes: &[u8]) -> String {
    oci_client::client::ImageLayer::new(bytes.to_vec(), String::new(), None).sha256_digest()
}
