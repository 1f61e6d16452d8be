//! Certificates for TLS tests, made by the test (rcgen): a CA, a server certificate for
//! `localhost` and 127.0.0.1 that it signed, and a client certificate it signed, as PEM files.
//! Shared like `common` (the CLI's tests include it with `#[path]`); it needs `rcgen` and `common`.

// Each test file uses its own part of it.
#![allow(dead_code)]

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

use crate::common::fresh_dir;

/// A CA (`ca.pem`, its key `ca-key.pem`; it names `localhost` and 127.0.0.1 too, as a CA made
/// for a test server with `openssl req -x509` does), a server certificate for `localhost` and
/// 127.0.0.1 it signed, and a client certificate it signed, as PEM files in a directory; the
/// same two expired (valid in 2020 only), as `expired-server.pem` and `expired-client.pem`; and
/// `elsewhere-server.pem`, a server certificate it signed for `db.example` only.
pub struct Pki {
    pub dir: PathBuf,
}

/// The names the test server is reached by.
fn server_names() -> Vec<String> {
    vec!["localhost".to_owned(), "127.0.0.1".to_owned()]
}

impl Pki {
    pub fn new(label: &str) -> Pki {
        let dir = fresh_dir(label);
        let mut ca_params = CertificateParams::new(server_names()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Each test's CA has a name of its own, as real CAs do: a client trusting another test's
        // CA then finds no issuer for the server's certificate.
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, format!("Ferrite test CA {label}"));
        let ca_key = KeyPair::generate().expect("CA key");
        std::fs::write(dir.join("ca-key.pem"), ca_key.serialize_pem()).expect("write the CA's key");
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write the CA");
        let certificates = [
            ("server", server_names(), false),
            ("client", vec![], false),
            ("expired-server", server_names(), true),
            ("expired-client", vec![], true),
            ("elsewhere-server", vec!["db.example".to_owned()], false),
        ];
        for (name, names, expired) in certificates {
            let key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::new(names).expect("params");
            if expired {
                params.not_before = rcgen::date_time_ymd(2020, 1, 1);
                params.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
            let certificate = params.signed_by(&key, &ca).expect("sign");
            std::fs::write(dir.join(format!("{name}.pem")), certificate.pem()).expect("write a certificate");
            std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).expect("write a key");
        }
        Pki { dir }
    }

    /// The path of one of the files (`ca.pem`, `ca-key.pem`, `server.pem`, `server-key.pem`,
    /// `client.pem`, `client-key.pem`, ...), as an argument.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The server arguments that make it speak TLS with this PKI's server certificate; with
    /// `mutual`, also requiring client certificates its CA signed.
    pub fn server_args(&self, mutual: bool) -> Vec<String> {
        let mut args = self.server_args_with("server");
        if mutual {
            args.extend(["--tls-client-ca".into(), self.path("ca.pem")]);
        }
        args
    }

    /// The server arguments that make it speak TLS with the certificate `NAME.pem` and its key
    /// `NAME-key.pem` (`ca` for the CA's own).
    pub fn server_args_with(&self, name: &str) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.path(&format!("{name}.pem")),
            "--tls-key".into(),
            self.path(&format!("{name}-key.pem")),
        ]
    }
}
