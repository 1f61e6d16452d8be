//! TLS for the client listeners: the server's certificate and key, and optionally the CA that
//! signs client certificates (mutual TLS), loaded once at start into a `rustls` configuration with
//! the `ring` provider. The handshake runs in each connection's task, bounded by the shard's
//! handshake timeout (`[limits] handshake_timeout_ms`), so a client that connects and says nothing
//! holds no more than its socket for that long and never delays another.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;
use crate::stream::ClientStream;

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|error| format!("cannot read certificates from {}: {error}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certificates)
}

/// The TLS configuration `config` names (none if it names no certificate), or why its files do
/// not make one.
pub(crate) fn server_config(config: &TlsConfig) -> Result<Option<Arc<ServerConfig>>, String> {
    let (Some(cert_file), Some(key_file)) = (&config.cert_file, &config.key_file) else { return Ok(None) };
    let chain = certificates(cert_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|error| format!("cannot read a private key from {}: {error}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS: {error}"))?;
    let builder = match &config.client_ca_file {
        Some(ca_file) => {
            let mut roots = RootCertStore::empty();
            for certificate in certificates(ca_file)? {
                roots.add(certificate).map_err(|error| format!("{}: {error}", ca_file.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| format!("client CA {}: {error}", ca_file.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(chain, key).map_err(|error| match error {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => format!(
            "the private key in {} is not the key of the certificate in {} (it belongs to another key pair)",
            key_file.display(),
            cert_file.display()
        ),
        error => format!("{} and {}: {error}", cert_file.display(), key_file.display()),
    })?;
    Ok(Some(Arc::new(config)))
}

/// The stream a client is served on: plain, or after a TLS handshake (which must complete
/// within `timeout`).
pub(crate) async fn accept(
    stream: TcpStream,
    acceptor: Option<&TlsAcceptor>,
    timeout: Duration,
) -> std::io::Result<ClientStream> {
    // Responses are small and latency matters more than packet count.
    stream.set_nodelay(true)?;
    match acceptor {
        None => Ok(ClientStream::Plain(stream)),
        Some(acceptor) => match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
            Ok(Ok(stream)) => Ok(ClientStream::Tls(Box::new(stream))),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")),
        },
    }
}
