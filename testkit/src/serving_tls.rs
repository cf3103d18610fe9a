//! A serving certificate for a webhook the tests run on 127.0.0.1: a CA of its own and a
//! certificate for `127.0.0.1` and `localhost` signed by it, made in memory (rcgen on ring, as
//! rustls is everywhere in the workspace). The webhook configuration's `caBundle` trusts the
//! CA; the server gets the certificate and key as PEM files, as Kubewarden's controller hands
//! its policy-server `tls.crt` and `tls.key` from a Secret.

use std::path::Path;

use anyhow::{Context as _, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The names the certificate is valid for.
pub const SUBJECT_NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// A CA and a serving certificate it signed, all PEM.
pub struct ServingCertificate {
    pub ca_pem: String,
    /// The serving certificate alone (policy-server refuses a file holding more than one).
    pub cert_pem: String,
    pub key_pem: String,
}

impl ServingCertificate {
    /// A new CA, and a certificate for [`SUBJECT_NAMES`] named `common_name`.
    pub fn generate(common_name: &str) -> Result<Self> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{common_name} CA"));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(SUBJECT_NAMES.map(str::to_owned).to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Self {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Writes the certificate and the key (readable by this user only) to `cert` and `key`.
    pub fn write(&self, cert: &Path, key: &Path) -> Result<()> {
        std::fs::write(cert, &self.cert_pem)
            .with_context(|| format!("writing {}", cert.display()))?;
        std::fs::write(key, &self.key_pem).with_context(|| format!("writing {}", key.display()))?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("restricting {}", key.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_and_a_certificate_it_signed_in_pem() {
        let serving = ServingCertificate::generate("test webhook").unwrap();
        assert!(serving.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(serving.cert_pem.matches("BEGIN CERTIFICATE").count(), 1);
        assert_ne!(serving.cert_pem, serving.ca_pem);
        assert!(serving.key_pem.contains("PRIVATE KEY"));
        let other = ServingCertificate::generate("test webhook").unwrap();
        assert_ne!(serving.ca_pem, other.ca_pem, "a new CA each time");
    }
}
