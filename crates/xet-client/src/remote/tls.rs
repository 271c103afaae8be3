//! The TLS configuration of clients for which git names CA certificates (`http.sslCAInfo`,
//! `http.sslCAPath`): the roots every client trusts (compiled-in and the system's) plus those
//! certificates, checked by webpki, and one thing webpki refuses that git and curl accept: a
//! server certificate that is byte for byte one of the configured certificates although it
//! is a CA certificate ([`PinnedOrWebPki`]).
//!
//! A certificate made with `openssl req -x509` (the usual self-signed certificate of a small
//! server) is its own issuer and has `basicConstraints CA:TRUE`. Put in the CA file, OpenSSL
//! (behind curl, behind git and git-lfs) takes it as a trust anchor and accepts the server
//! that presents it. webpki never accepts a CA certificate as a server's own
//! (`CaUsedAsEndEntity`), whatever the roots, so without this the agent refused a server git
//! itself talks to, and its advice was to turn certificate checks off.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::HttpOptions;

/// Whether `e` is webpki's refusal of a CA certificate presented as a server's own.
pub(crate) fn is_ca_as_server_cert(e: &CertificateError) -> bool {
    match e {
        CertificateError::Other(other) => other
            .0
            .downcast_ref::<webpki::Error>()
            .is_some_and(|w| matches!(w, webpki::Error::CaUsedAsEndEntity)),
        _ => false,
    }
}

/// The certificates of PEM `bytes` (those that do not parse are skipped).
fn pem_certificates(bytes: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(bytes)
        .filter_map(Result::ok)
        .collect()
}

/// The certificates git names (the CA files and the files of the CA directories), as
/// [`HttpOptions::certificates`] reads them.
fn configured_certificates(options: &HttpOptions) -> Result<Vec<CertificateDer<'static>>, String> {
    let mut out = Vec::new();
    for file in &options.ca_files {
        let bytes = std::fs::read(file)
            .map_err(|e| format!("cannot read the CA file {}: {e}", file.display()))?;
        let certs = pem_certificates(&bytes);
        if certs.is_empty() {
            return Err(format!(
                "the CA file {} holds no PEM certificate",
                file.display()
            ));
        }
        out.extend(certs);
    }
    for dir in &options.ca_dirs {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot list the CA directory {}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if let (true, Ok(bytes)) = (path.is_file(), std::fs::read(&path)) {
                out.extend(pem_certificates(&bytes));
            }
        }
    }
    Ok(out)
}

/// The client certificate chain and key git names, if any.
fn client_identity(
    options: &HttpOptions,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, String> {
    let Some((cert, key)) = &options.client_cert else {
        return Ok(None);
    };
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
    };
    let cert_pem = read(cert, "client certificate")?;
    let key_pem = match key {
        Some(key) => read(key, "client key")?,
        None => cert_pem.clone(),
    };
    let chain = pem_certificates(&cert_pem);
    let key = PrivateKeyDer::from_pem_slice(&key_pem).ok();
    match (chain.is_empty(), key) {
        (false, Some(key)) => Ok(Some((chain, key))),
        _ => Err(format!(
            "the client certificate {} (with its key) cannot be used: no PEM certificate and \
             private key found",
            cert.display()
        )),
    }
}

/// The crypto provider reqwest's own TLS configuration uses: the process default if one is
/// installed, else ring.
fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The TLS configuration of a client with `options` that names CA certificates (see the module
/// documentation); an unreadable file is an error naming it.
pub(crate) fn client_config(options: &HttpOptions) -> Result<rustls::ClientConfig, String> {
    let pinned = configured_certificates(options)?;
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    // The system's store, as reqwest loads it: what does not parse is skipped.
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    for cert in &pinned {
        if let Err(e) = roots.add(cert.clone()) {
            tracing::debug!("a configured CA certificate is not a usable root: {e}");
        }
    }
    let provider = provider();
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("cannot set up certificate checks: {e}"))?;
    let verifier = PinnedOrWebPki {
        webpki,
        pinned,
        algorithms: provider.signature_verification_algorithms,
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let mut config = match client_identity(options)? {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
            format!(
                "the client certificate {} (with its key) cannot be used: {e}",
                options
                    .client_cert
                    .as_ref()
                    .map_or(String::new(), |(c, _)| c.display().to_string())
            )
        })?,
        None => builder.with_no_client_auth(),
    };
    // The client speaks HTTP/1.1 only (reqwest without its http2 feature).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// webpki's checks against the roots, and where webpki refuses a server certificate only for
/// being a CA certificate, acceptance of one that is byte for byte a configured certificate
/// and valid for the server's name (see the module documentation).
///
/// webpki checks a certificate's validity period before its basic constraints, so a
/// certificate it refuses as a CA is within its validity period; the name is checked here.
/// Its extended key usage is not looked at: it is trusted as it is, being the very
/// certificate configured. The handshake's signature is checked as always, with the
/// certificate's key: only the holder of the pinned certificate's private key gets through.
#[derive(Debug)]
struct PinnedOrWebPki {
    webpki: Arc<WebPkiServerVerifier>,
    /// The configured certificates (CA files and directories).
    pinned: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedOrWebPki {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => return Ok(verified),
            Err(e) => e,
        };
        let as_ca =
            matches!(&refused, rustls::Error::InvalidCertificate(c) if is_ca_as_server_cert(c));
        if !as_ca
            || !self
                .pinned
                .iter()
                .any(|p| p.as_ref() == end_entity.as_ref())
        {
            return Err(refused);
        }
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&cert, server_name)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

    /// A self-signed certificate for `names`, a CA (`openssl req -x509` makes those) or not,
    /// valid from the start of year `from` to the start of year `to`.
    fn self_signed(names: &[&str], ca: bool, from: i32, to: i32) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
        if ca {
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        }
        p.not_before = rcgen::date_time_ymd(from, 1, 1);
        p.not_after = rcgen::date_time_ymd(to, 1, 1);
        p.self_signed(&key).unwrap().der().clone()
    }

    fn verifier(pinned: &[&CertificateDer<'static>]) -> PinnedOrWebPki {
        let mut roots = RootCertStore::empty();
        for p in pinned {
            let _ = roots.add((*p).clone());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        PinnedOrWebPki {
            webpki: WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .unwrap(),
            pinned: pinned.iter().map(|p| (*p).clone()).collect(),
            algorithms: provider.signature_verification_algorithms,
        }
    }

    fn check(v: &PinnedOrWebPki, cert: &CertificateDer<'_>, name: &str) -> Result<(), String> {
        let name = ServerName::try_from(name.to_string()).unwrap();
        v.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Valid now (and for this century).
    const NOW: (i32, i32) = (2020, 2100);

    #[test]
    fn a_self_signed_ca_certificate_in_the_ca_file_is_accepted_for_its_names_only() {
        let cert = self_signed(&["127.0.0.1", "localhost"], true, NOW.0, NOW.1);
        let v = verifier(&[&cert]);
        check(&v, &cert, "127.0.0.1").unwrap();
        check(&v, &cert, "localhost").unwrap();
        let e = check(&v, &cert, "other.test").unwrap_err();
        assert!(e.contains("not valid for"), "{e}");
    }

    #[test]
    fn what_is_not_exactly_in_the_ca_file_or_out_of_date_is_refused() {
        let pinned = self_signed(&["localhost"], true, NOW.0, NOW.1);
        let v = verifier(&[&pinned]);
        // Another self-signed CA certificate for the same name.
        let other = self_signed(&["localhost"], true, NOW.0, NOW.1);
        check(&v, &other, "localhost").unwrap_err();
        // Expired, or not valid yet, though in the CA file.
        for (from, to) in [(2001, 2002), (2200, 2201)] {
            let dated = self_signed(&["localhost"], true, from, to);
            let v = verifier(&[&dated]);
            let e = check(&v, &dated, "localhost").unwrap_err();
            assert!(e.contains("expired") || e.contains("not valid yet"), "{e}");
        }
        // Not in the CA file: a self-signed CA certificate is webpki's refusal, told apart.
        let v = verifier(&[&other]);
        let e = v
            .verify_server_cert(
                &pinned,
                &[],
                &ServerName::try_from("localhost").unwrap(),
                &[],
                UnixTime::now(),
            )
            .unwrap_err();
        assert!(
            matches!(&e, rustls::Error::InvalidCertificate(c) if is_ca_as_server_cert(c)),
            "{e:?}"
        );
    }

    #[test]
    fn a_self_signed_leaf_in_the_ca_file_is_webpkis_to_accept() {
        // Not a CA: webpki takes it as its own trust anchor; nothing of ours is needed.
        let cert = self_signed(&["localhost"], false, NOW.0, NOW.1);
        let v = verifier(&[&cert]);
        check(&v, &cert, "localhost").unwrap();
        assert!(v
            .webpki
            .verify_server_cert(
                &cert,
                &[],
                &ServerName::try_from("localhost").unwrap(),
                &[],
                UnixTime::now()
            )
            .is_ok());
    }
}
