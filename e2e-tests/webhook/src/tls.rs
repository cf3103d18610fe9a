//! The stand-in's serving certificate: a CA and a certificate for 127.0.0.1 (and the
//! listening address) signed by it, generated in memory at start (rcgen on ring); the CA is
//! what the webhook configuration's `caBundle` trusts. rustls on ring, as everywhere in the
//! workspace.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// A TLS server configuration and the PEM of the CA that signed its certificate.
pub struct ServingTls {
    pub config: rustls::ServerConfig,
    pub ca_pem: String,
}

/// The names the serving certificate is valid for: 127.0.0.1, localhost and `listen`'s
/// address when it is a specific one.
pub fn subject_names(listen: SocketAddr) -> Vec<String> {
    let mut names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let ip = listen.ip();
    if !ip.is_unspecified() && !names.contains(&ip.to_string()) {
        names.push(ip.to_string());
    }
    names
}

/// A new CA and a serving certificate for `listen`.
pub fn generate(listen: SocketAddr) -> Result<ServingTls> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(
        DnType::CommonName,
        "namespace-baseline stand-in policy-server CA",
    );
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf_key = KeyPair::generate()?;
    let mut leaf_params = CertificateParams::new(subject_names(listen))?;
    leaf_params.distinguished_name.push(
        DnType::CommonName,
        "namespace-baseline stand-in policy-server",
    );
    leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone(), ca_cert.der().clone()], key)
        .context("the serving certificate")?;
    // The API server calls webhooks over HTTP/1.1 or HTTP/2; hyper serves HTTP/1.1 here.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(ServingTls {
        config,
        ca_pem: ca_cert.pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_names_loopback_and_a_specific_listen_address() {
        assert_eq!(
            subject_names("127.0.0.1:8443".parse().unwrap()),
            ["127.0.0.1", "localhost"]
        );
        assert_eq!(
            subject_names("0.0.0.0:8443".parse().unwrap()),
            ["127.0.0.1", "localhost"]
        );
        assert_eq!(
            subject_names("10.0.0.7:8443".parse().unwrap()),
            ["127.0.0.1", "localhost", "10.0.0.7"]
        );
    }

    #[test]
    fn generates_a_ca_in_pem() {
        let tls = generate("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(tls.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(tls.config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
