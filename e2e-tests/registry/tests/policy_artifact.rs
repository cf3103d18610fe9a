//! policy.wasm, pushed to a real registry (the CNCF distribution registry) by oras as an OCI
//! artifact with Kubewarden's media types, is pulled back by digest with oci-client exactly as
//! Kubewarden's policy-fetcher pulls a `registry://` module: byte for byte the module, and
//! blob for blob what Kubewarden's own push (`kwctl push`, policy-fetcher's `Registry::push`)
//! would have stored.

use std::collections::BTreeMap;

use namespace_baseline_registry_tests::{
    OCI_IMAGE_MANIFEST_MEDIA_TYPE, WASM_CONFIG, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE,
    client, env, policy_ref, policy_wasm, sha256,
};
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::{self, OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;

#[test]
fn the_media_types_are_kubewardens() {
    // policy-fetcher pushes and pulls with oci-client's constants.
    assert_eq!(manifest::WASM_CONFIG_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE);
    assert_eq!(manifest::WASM_LAYER_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE);
    assert_eq!(
        manifest::OCI_IMAGE_MEDIA_TYPE,
        OCI_IMAGE_MANIFEST_MEDIA_TYPE
    );
}

/// `Registry::fetch` of policy-fetcher: `pull` accepting only the wasm layer media type, the
/// first layer is the module.
#[tokio::test]
async fn pulled_by_digest_as_policy_server_does_it_is_the_module() {
    let reference = policy_ref();
    let wasm = policy_wasm();
    let image = client()
        .pull(
            &reference,
            &RegistryAuth::Anonymous,
            vec![WASM_LAYER_MEDIA_TYPE],
        )
        .await
        .unwrap_or_else(|e| panic!("pulling {reference}: {e}"));

    assert_eq!(
        image.digest.as_deref(),
        reference.digest(),
        "manifest digest"
    );
    assert_eq!(image.layers.len(), 1, "one layer, the module");
    let layer = &image.layers[0];
    assert_eq!(layer.media_type, WASM_LAYER_MEDIA_TYPE);
    assert_eq!(layer.data.len(), wasm.len(), "module size");
    assert!(
        layer.data[..] == wasm[..],
        "the pulled module differs from the pushed file"
    );
    assert_eq!(image.config.media_type, WASM_CONFIG_MEDIA_TYPE);
    assert_eq!(&image.config.data[..], WASM_CONFIG, "config blob");
    println!(
        "FIGURE policy artifact {reference}: module {} bytes, {}",
        wasm.len(),
        sha256(&wasm)
    );
}

/// A client that accepts only other layer types refuses the artifact: the media type check
/// is real (a module pushed with a generic type would not load in policy-server).
#[tokio::test]
async fn a_pull_that_accepts_only_other_layer_types_is_refused() {
    let reference = policy_ref();
    let refused = client()
        .pull(
            &reference,
            &RegistryAuth::Anonymous,
            vec![manifest::IMAGE_LAYER_MEDIA_TYPE],
        )
        .await;
    let error = refused
        .err()
        .expect("a tar-layer-only pull of the wasm artifact succeeded");
    assert!(
        error.to_string().contains(WASM_LAYER_MEDIA_TYPE),
        "unexpected error: {error}"
    );
}

/// The manifest, read raw: the digest is the sha256 of its bytes, and its shape is what
/// Kubewarden pushes (OCI image manifest, config `{}`, one wasm layer with the module's digest
/// and size). `created` is pinned, so the same module always has the same digest.
#[tokio::test]
async fn the_manifest_has_kubewardens_shape_and_a_pinned_created_time() {
    let reference = policy_ref();
    let wasm = policy_wasm();
    let (raw, digest) = client()
        .pull_manifest_raw(
            &reference,
            &RegistryAuth::Anonymous,
            &[OCI_IMAGE_MANIFEST_MEDIA_TYPE],
        )
        .await
        .unwrap_or_else(|e| panic!("pulling the manifest of {reference}: {e}"));
    assert_eq!(Some(digest.as_str()), reference.digest());
    assert_eq!(sha256(&raw), digest, "the digest is the manifest's own");

    let manifest: OciImageManifest = serde_json::from_slice(&raw).expect("an OCI image manifest");
    assert_eq!(manifest.schema_version, 2);
    // oras writes the manifest's mediaType; Kubewarden's own push leaves it out (optional in
    // the OCI image spec). Present, it must be the OCI image manifest's.
    assert!(
        matches!(
            manifest.media_type.as_deref(),
            None | Some(OCI_IMAGE_MANIFEST_MEDIA_TYPE)
        ),
        "manifest mediaType {:?}",
        manifest.media_type
    );
    assert_eq!(manifest.config.media_type, WASM_CONFIG_MEDIA_TYPE);
    assert_eq!(manifest.config.digest, sha256(WASM_CONFIG));
    assert_eq!(manifest.config.size, WASM_CONFIG.len() as i64);
    assert_eq!(manifest.layers.len(), 1);
    assert_eq!(manifest.layers[0].media_type, WASM_LAYER_MEDIA_TYPE);
    assert_eq!(manifest.layers[0].digest, sha256(&wasm));
    assert_eq!(manifest.layers[0].size, wasm.len() as i64);

    let created = env("NSB_POLICY_CREATED");
    let annotations = manifest.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("org.opencontainers.image.created"),
        Some(&created),
        "oras sets a created time on every push unless given one; it must be the pinned {created}"
    );
}

fn descriptor_without_annotations(d: &OciDescriptor) -> (String, String, i64) {
    (d.media_type.clone(), d.digest.clone(), d.size)
}

/// The same module pushed the way Kubewarden pushes it (policy-fetcher's `Registry::push`:
/// `ImageLayer::new(module, WASM_LAYER_MEDIA_TYPE)`, config `{}` of `WASM_CONFIG_MEDIA_TYPE`,
/// `OciImageManifest::build`) stores the same blobs under the same media types as the
/// oras push: the two manifests differ only in annotations and in the manifest's own
/// (optional) mediaType, which policy-server does not read.
#[tokio::test]
async fn kubewardens_own_push_stores_the_same_blobs() {
    let oras_ref = policy_ref();
    let wasm = policy_wasm();
    let client = client();
    let kubewarden_ref: oci_client::Reference = format!(
        "{}/{}:kubewarden-style",
        env("NSB_REGISTRY"),
        oras_ref.repository()
    )
    .parse()
    .expect("a reference");

    let layers = vec![ImageLayer::new(
        wasm.clone(),
        manifest::WASM_LAYER_MEDIA_TYPE.to_string(),
        None,
    )];
    let config = Config {
        data: WASM_CONFIG.to_vec().into(),
        media_type: manifest::WASM_CONFIG_MEDIA_TYPE.to_string(),
        annotations: None,
    };
    let built = OciImageManifest::build(&layers, &config, None::<BTreeMap<String, String>>);
    client
        .push(
            &kubewarden_ref,
            &layers,
            config,
            &RegistryAuth::Anonymous,
            Some(built),
        )
        .await
        .unwrap_or_else(|e| panic!("pushing {kubewarden_ref}: {e}"));

    let (theirs, _) = client
        .pull_image_manifest(&kubewarden_ref, &RegistryAuth::Anonymous)
        .await
        .expect("the Kubewarden-style manifest");
    let (ours, _) = client
        .pull_image_manifest(&oras_ref, &RegistryAuth::Anonymous)
        .await
        .expect("the oras manifest");
    assert_eq!(ours.schema_version, theirs.schema_version);
    assert_eq!(ours.artifact_type, theirs.artifact_type, "artifactType");
    assert_eq!(
        descriptor_without_annotations(&ours.config),
        descriptor_without_annotations(&theirs.config),
        "config descriptor"
    );
    assert_eq!(
        ours.layers
            .iter()
            .map(descriptor_without_annotations)
            .collect::<Vec<_>>(),
        theirs
            .layers
            .iter()
            .map(descriptor_without_annotations)
            .collect::<Vec<_>>(),
        "layer descriptors"
    );
    // What differs: oras names the layer's file (org.opencontainers.image.title), dates the
    // manifest and declares its mediaType; Kubewarden's push (without kwctl's metadata
    // annotations) does none of these.
    println!(
        "NOTE oras: mediaType {:?}, annotations {:?}, layer annotations {:?}",
        ours.media_type, ours.annotations, ours.layers[0].annotations
    );
    println!(
        "NOTE Kubewarden-style: mediaType {:?}, annotations {:?}, layer annotations {:?}",
        theirs.media_type, theirs.annotations, theirs.layers[0].annotations
    );
}
