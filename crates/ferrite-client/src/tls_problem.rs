//! What a failed TLS handshake means, in a sentence a user can act on.
//!
//! rustls reports a refused certificate as an enum (`InvalidCertificate(Other(OtherError(
//! CaUsedAsEndEntity)))`) that names the check, not the mistake. The mistakes are few and
//! common: a CA certificate used as the server's own (what `openssl req -x509` makes), a
//! certificate for another name, one signed by another CA, one that expired; each gets the
//! sentence that says what to change.

use std::io;
use std::path::PathBuf;

use rustls::{AlertDescription, CertificateError, OtherError};
use rustls_pki_types::UnixTime;

/// What the client knew when the handshake failed, for the sentences that name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// The name the server's certificate had to carry.
    pub(crate) host: String,
    /// The file of the CA certificates the client trusts.
    pub(crate) ca_file: PathBuf,
    /// Whether the client offered a certificate of its own (mutual TLS).
    pub(crate) client_certificate: bool,
}

/// The sentence for a failed handshake, or for a read that failed with a TLS error (a server
/// that refuses a client certificate says so after the client finished its part of a TLS 1.3
/// handshake, so the client learns it at its first read); `None` if `error` is no TLS failure.
pub(crate) fn explain(error: &io::Error, attempt: &Attempt) -> Option<String> {
    let tls = error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())?;
    Some(match tls {
        rustls::Error::InvalidCertificate(certificate) => server_certificate(certificate, attempt),
        rustls::Error::AlertReceived(alert) => alert_received(*alert, attempt),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            "the server did not answer in TLS: it speaks in clear (connect without TLS) or is not a ferrite-server"
                .to_owned()
        }
        other => format!("TLS failed: {other}"),
    })
}

/// The sentence for a failed handshake whatever the error: [`explain`]'s, or what the I/O error
/// says.
pub(crate) fn explain_handshake(error: &io::Error, attempt: &Attempt) -> String {
    explain(error, attempt).unwrap_or_else(|| match error.kind() {
        io::ErrorKind::UnexpectedEof => {
            "the server closed the connection during the handshake: a server without TLS does (is it configured with \
             [tls]?), as does one that refused the handshake"
                .to_owned()
        }
        _ => format!("the handshake failed: {error}"),
    })
}

/// Why the client refused the server's certificate.
fn server_certificate(error: &CertificateError, attempt: &Attempt) -> String {
    let host = &attempt.host;
    let ca_file = attempt.ca_file.display();
    let fix_it = "give the server a current certificate";
    match error {
        CertificateError::Expired => format!("the server's certificate has expired: {fix_it}"),
        CertificateError::ExpiredContext { time, not_after } => {
            format!("the server's certificate expired {} ago: {fix_it}", span(*not_after, *time))
        }
        CertificateError::NotValidYet => {
            "the server's certificate is not valid yet: check the clock of this machine and the dates the CA gave it"
                .to_owned()
        }
        CertificateError::NotValidYetContext { time, not_before } => format!(
            "the server's certificate is not valid for another {}: check the clock of this machine and the dates the \
             CA gave it",
            span(*time, *not_before)
        ),
        CertificateError::NotValidForName => format!(
            "the server's certificate is not valid for {host}: connect with a name it carries, or give the server a \
             certificate whose subjectAltName names {host}"
        ),
        CertificateError::NotValidForNameContext { presented, .. } => format!(
            "the server's certificate is not valid for {host} (it names {}): connect with one of those names, or give \
             the server a certificate whose subjectAltName names {host}",
            if presented.is_empty() { "nothing".to_owned() } else { presented.join(", ") }
        ),
        CertificateError::UnknownIssuer => format!(
            "the server's certificate was not signed by a CA in {ca_file}: trust the CA that signed it, or give the \
             server a certificate that CA signed"
        ),
        CertificateError::BadSignature => format!(
            "the server's certificate names a CA in {ca_file} as its issuer, but that CA did not sign it: another \
             CA of the same name did (trust that one), or the certificate is damaged"
        ),
        CertificateError::Revoked => "the server's certificate has been revoked by its CA".to_owned(),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "the server's certificate is not for TLS servers (its extended key usage lacks serverAuth): give the \
             server one made for serving"
                .to_owned()
        }
        CertificateError::UnsupportedSignatureAlgorithmContext { .. }
        | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
            "the server's certificate is signed with an algorithm this client does not accept (it accepts ECDSA, \
             Ed25519 and RSA with SHA-256 or better)"
                .to_owned()
        }
        CertificateError::Other(other) => server_certificate_other(other),
        other => format!("the server's certificate was refused ({other})"),
    }
}

/// The checks rustls passes on from its certificate verifier (webpki) without a variant of
/// their own.
fn server_certificate_other(error: &OtherError) -> String {
    match error.0.downcast_ref::<webpki::Error>() {
        Some(webpki::Error::CaUsedAsEndEntity) => {
            "the server's certificate is a CA certificate (basicConstraints CA:TRUE, which `openssl req -x509` \
             makes), used as the server's own: have that CA sign a certificate for the server and give the server \
             that one (docs/security.md shows the openssl commands)"
                .to_owned()
        }
        Some(webpki::Error::EndEntityUsedAsCa) => {
            "the server's chain has a certificate that is not a CA's signing another: give the server the chain \
             its CA issued, leaf first"
                .to_owned()
        }
        _ => format!("the server's certificate was refused ({})", error.0),
    }
}

/// Why the server ended the handshake, from the alert it sent.
fn alert_received(alert: AlertDescription, attempt: &Attempt) -> String {
    let refused = "the server refused this client's certificate";
    match alert {
        AlertDescription::CertificateRequired => {
            "the server requires a client certificate (mutual TLS) and this client gave none: give one signed by a \
             CA the server trusts for clients"
                .to_owned()
        }
        AlertDescription::CertificateExpired if attempt.client_certificate => {
            format!("{refused}: it has expired (give the client a current one)")
        }
        AlertDescription::UnknownCA if attempt.client_certificate => format!(
            "{refused}: it was not signed by a CA the server trusts for clients (the server's tls.client_ca_file)"
        ),
        AlertDescription::UnsupportedCertificate if attempt.client_certificate => {
            format!("{refused}: it is not made for TLS clients (its extended key usage lacks clientAuth)")
        }
        AlertDescription::CertificateRevoked if attempt.client_certificate => {
            format!("{refused}: it has been revoked")
        }
        AlertDescription::BadCertificate | AlertDescription::CertificateUnknown | AlertDescription::DecryptError
            if attempt.client_certificate =>
        {
            format!(
                "{refused} ({alert:?}): give one signed by a CA the server trusts for clients, current and made for \
                 TLS clients"
            )
        }
        AlertDescription::HandshakeFailure
        | AlertDescription::ProtocolVersion
        | AlertDescription::CertificateUnknown => {
            format!(
                "the server refused the handshake ({alert:?}): if it requires client certificates (mutual TLS), give \
                 this client one"
            )
        }
        other => format!("the server ended the handshake with the TLS alert {other:?}"),
    }
}

/// The time from `earlier` to `later` in the largest whole unit, for "expired 3 days ago".
fn span(earlier: UnixTime, later: UnixTime) -> String {
    let seconds = later.as_secs().saturating_sub(earlier.as_secs());
    let (count, unit) = match seconds {
        s if s >= 2 * 86_400 => (s / 86_400, "days"),
        s if s >= 2 * 3_600 => (s / 3_600, "hours"),
        s if s >= 2 * 60 => (s / 60, "minutes"),
        s => (s, "seconds"),
    };
    format!("{count} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn attempt(client_certificate: bool) -> Attempt {
        Attempt { host: "db.example".to_owned(), ca_file: PathBuf::from("ca.pem"), client_certificate }
    }

    fn handshake_error(error: rustls::Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    fn certificate(error: CertificateError) -> String {
        explain_handshake(&handshake_error(rustls::Error::InvalidCertificate(error)), &attempt(false))
    }

    /// Each certificate mistake a user makes gets the sentence that names it, never rustls's
    /// enum.
    #[test]
    fn certificate_problems_read_as_sentences() {
        let ca_as_leaf = CertificateError::Other(OtherError(Arc::new(webpki::Error::CaUsedAsEndEntity)));
        let text = certificate(ca_as_leaf);
        assert!(text.contains("is a CA certificate") && text.contains("openssl req -x509"), "{text}");
        assert!(!text.contains("CaUsedAsEndEntity"), "{text}");

        let day = 86_400;
        let expired = CertificateError::ExpiredContext {
            time: UnixTime::since_unix_epoch(Duration::from_secs(1_000 * day)),
            not_after: UnixTime::since_unix_epoch(Duration::from_secs(990 * day)),
        };
        assert_eq!(
            certificate(expired),
            "the server's certificate expired 10 days ago: give the server a current certificate"
        );

        let wrong_name = CertificateError::NotValidForNameContext {
            expected: rustls_pki_types::ServerName::try_from("db.example").expect("a name"),
            presented: vec!["DnsName(\"other.example\")".to_owned()],
        };
        let text = certificate(wrong_name);
        assert!(text.starts_with("the server's certificate is not valid for db.example (it names"), "{text}");

        let text = certificate(CertificateError::UnknownIssuer);
        assert!(text.contains("not signed by a CA in ca.pem"), "{text}");
        assert!(certificate(CertificateError::BadSignature).contains("another CA of the same name"));
        assert!(certificate(CertificateError::InvalidPurpose).contains("serverAuth"));
    }

    #[test]
    fn alerts_say_what_the_server_wanted() {
        let alert = |description, client_certificate| {
            explain_handshake(&handshake_error(rustls::Error::AlertReceived(description)), &attempt(client_certificate))
        };
        assert!(alert(AlertDescription::CertificateRequired, false).contains("requires a client certificate"));
        assert!(alert(AlertDescription::UnknownCA, true).contains("not signed by a CA the server trusts for clients"));
        assert!(alert(AlertDescription::CertificateExpired, true).contains("it has expired"));
        assert!(alert(AlertDescription::HandshakeFailure, false).contains("refused the handshake"));
    }

    #[test]
    fn a_server_in_clear_and_a_closed_connection_are_named() {
        let clear = handshake_error(rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType));
        assert!(explain_handshake(&clear, &attempt(false)).contains("did not answer in TLS"));
        let closed = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert!(explain_handshake(&closed, &attempt(false)).contains("closed the connection during the handshake"));
        assert_eq!(explain(&closed, &attempt(false)), None, "no TLS failure");
    }

    #[test]
    fn spans_use_the_largest_whole_unit() {
        let at = |seconds| UnixTime::since_unix_epoch(Duration::from_secs(seconds));
        assert_eq!(span(at(0), at(59)), "59 seconds");
        assert_eq!(span(at(0), at(3 * 60)), "3 minutes");
        assert_eq!(span(at(0), at(5 * 3_600)), "5 hours");
        assert_eq!(span(at(0), at(400 * 86_400)), "400 days");
        assert_eq!(span(at(10), at(0)), "0 seconds");
    }
}
