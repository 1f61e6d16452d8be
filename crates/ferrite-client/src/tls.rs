//! TLS to a server whose listeners require it: the CA that signed the server's certificate,
//! and, for a server that requires client certificates (mutual TLS), this client's certificate
//! and key, all PEM files read once when the options are made into a connector.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::{Error, Result};
use crate::tls_problem::{self, Attempt};

/// How a client speaks TLS to its server ([`crate::ClientOptions::tls`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM file with the CA certificate(s) the server's certificate must chain to.
    pub ca_file: PathBuf,
    /// PEM files with this client's certificate chain and its key, for servers that require
    /// client certificates.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl TlsOptions {
    /// Trusts the CA certificates in `ca_file`; no client certificate.
    pub fn with_ca(ca_file: impl Into<PathBuf>) -> TlsOptions {
        TlsOptions { ca_file: ca_file.into(), client_cert: None }
    }
}

fn tls_error(message: String) -> Error {
    Error::Io { context: "setting up TLS".into(), source: std::io::Error::other(message) }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|error| tls_error(format!("cannot read certificates from {}: {error}", path.display())))?;
    if certificates.is_empty() {
        return Err(tls_error(format!("{} holds no PEM certificate", path.display())));
    }
    Ok(certificates)
}

/// A TLS client configuration ready to connect, with what its errors name.
#[derive(Clone)]
pub(crate) struct Connector {
    inner: TlsConnector,
    ca_file: PathBuf,
    client_certificate: bool,
}

/// The connector `options` describe.
pub(crate) fn connector(options: &TlsOptions) -> Result<Connector> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(&options.ca_file)? {
        roots.add(certificate).map_err(|error| tls_error(format!("{}: {error}", options.ca_file.display())))?;
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|error| tls_error(error.to_string()))?
        .with_root_certificates(roots);
    let config = match &options.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert_file, key_file)) => {
            let key = PrivateKeyDer::from_pem_file(key_file).map_err(|error| {
                tls_error(format!("cannot read a private key from {}: {error}", key_file.display()))
            })?;
            builder
                .with_client_auth_cert(certificates(cert_file)?, key)
                .map_err(|error| tls_error(error.to_string()))?
        }
    };
    Ok(Connector {
        inner: TlsConnector::from(Arc::new(config)),
        ca_file: options.ca_file.clone(),
        client_certificate: options.client_cert.is_some(),
    })
}

/// Runs the TLS handshake on `stream` to the server at `address` (`host:port`; the host is the
/// name its certificate must carry). Returns the stream and what the attempt knew, for
/// explaining a TLS failure that shows only at the first read.
pub(crate) async fn handshake(
    connector: &Connector,
    address: &str,
    stream: TcpStream,
) -> Result<(TlsStream<TcpStream>, Attempt)> {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_owned())
        .map_err(|error| tls_error(format!("{host} is not a name a certificate can carry: {error}")))?;
    let attempt = Attempt {
        host: host.to_owned(),
        ca_file: connector.ca_file.clone(),
        client_certificate: connector.client_certificate,
    };
    match connector.inner.connect(name, stream).await {
        Ok(stream) => Ok((stream, attempt)),
        Err(error) => {
            Err(Error::Tls { address: address.to_owned(), problem: tls_problem::explain_handshake(&error, &attempt) })
        }
    }
}
