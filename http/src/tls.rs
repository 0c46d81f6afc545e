//! TLS for a server that faces a network (`trellis mcp serve --http --tls-cert --tls-key`):
//! rustls on ring, from a certificate chain and a private key in PEM files. The handshake
//! is held to the header deadline, so a client that connects and says nothing holds its
//! connection no longer over TLS than without it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// A server's certificate and key, ready to accept connections.
#[derive(Clone)]
pub struct Tls {
    pub(crate) acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file could not be read, or holds no certificate.
    #[error("cannot read a certificate chain (PEM) from {path}: {why}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The key file could not be read, or holds no private key.
    #[error("cannot read a private key (PEM: PKCS#8, PKCS#1 or SEC1) from {path}: {why}")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The key does not fit the certificate, or rustls refused them.
    #[error("the certificate and key cannot serve TLS: {0}; check that the key is the certificate's")]
    Config(String),
}

impl Tls {
    /// TLS with the certificate chain in `cert` (the server's first) and the private key
    /// in `key`, both PEM.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let certificate = |why: String| TlsError::Certificate { path: cert.to_path_buf(), why };
        let chain = CertificateDer::pem_file_iter(cert)
            .map_err(|e| certificate(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| certificate(e.to_string()))?;
        if chain.is_empty() {
            return Err(certificate("it holds no CERTIFICATE block".into()));
        }
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| TlsError::Key { path: key.to_path_buf(), why: e.to_string() })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::Config(e.to_string()))?;
        Ok(Tls { acceptor: TlsAcceptor::from(Arc::new(config)) })
    }
}
