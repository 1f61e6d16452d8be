//! The first exchange on a peer connection: the caller says who it is and whom it calls, and
//! both prove they hold the cluster's secret (`[cluster] secret_file`) without sending it.
//!
//! 1. The caller sends its [`Hello`], which carries a random challenge.
//! 2. The listener answers with its own challenge and `HMAC(secret, "ferrite peer listener" ||
//!    hello || its challenge)`.
//! 3. The caller checks that proof and sends `HMAC(secret, "ferrite peer caller" || hello ||
//!    the listener's challenge)`, which the listener checks.
//!
//! A proof covers both challenges, so a recorded handshake cannot be replayed, and it covers the
//! hello, so a caller cannot claim another node id or group than the one it proved itself for.
//! Without a secret the same exchange runs with an empty key: it proves nothing, and the server
//! warns at start that anyone who reaches the peer port can act as a node. The traffic after the
//! handshake is not encrypted: peers belong on a private network (`docs/cluster.md`).

use std::io;
use std::time::Duration;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::wire::{Hello, HELLO_BYTES, NONCE_BYTES};

/// How long the other side may take over the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes of a proof (HMAC-SHA256).
const PROOF_BYTES: usize = 32;
/// Shortest secret accepted.
pub const SECRET_BYTES_MIN: usize = 16;

const LISTENER: &[u8] = b"ferrite peer listener";
const CALLER: &[u8] = b"ferrite peer caller";

/// The cluster's secret, as the key of the handshake's proofs.
#[derive(Clone)]
pub struct PeerSecret {
    key: hmac::Key,
    /// Whether a secret was configured (else the key is empty and proves nothing).
    pub configured: bool,
}

impl std::fmt::Debug for PeerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerSecret").field("configured", &self.configured).finish_non_exhaustive()
    }
}

impl PeerSecret {
    /// The secret `bytes` (a secret file's content, its trailing line end removed), or none.
    pub fn new(bytes: Option<&[u8]>) -> PeerSecret {
        PeerSecret { key: hmac::Key::new(hmac::HMAC_SHA256, bytes.unwrap_or_default()), configured: bytes.is_some() }
    }

    /// Reads the secret file at `path`: at least [`SECRET_BYTES_MIN`] bytes once a trailing line
    /// end is removed.
    pub fn load(path: &std::path::Path) -> Result<PeerSecret, String> {
        let bytes = std::fs::read(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        let secret = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let secret = secret.strip_suffix(b"\r").unwrap_or(secret);
        if secret.len() < SECRET_BYTES_MIN {
            return Err(format!(
                "{} holds {} bytes: a cluster secret needs at least {SECRET_BYTES_MIN} (e.g. `openssl rand -hex 32`)",
                path.display(),
                secret.len()
            ));
        }
        Ok(PeerSecret::new(Some(secret)))
    }

    fn proof(&self, role: &[u8], hello: &[u8; HELLO_BYTES], nonce: &[u8; NONCE_BYTES]) -> hmac::Tag {
        let mut context = hmac::Context::with_key(&self.key);
        context.update(role);
        context.update(hello);
        context.update(nonce);
        context.sign()
    }

    fn verify(&self, role: &[u8], hello: &[u8; HELLO_BYTES], nonce: &[u8; NONCE_BYTES], proof: &[u8]) -> bool {
        let mut message = Vec::with_capacity(role.len() + HELLO_BYTES + NONCE_BYTES);
        message.extend_from_slice(role);
        message.extend_from_slice(hello);
        message.extend_from_slice(nonce);
        hmac::verify(&self.key, &message, proof).is_ok()
    }
}

/// A random challenge.
pub fn nonce() -> [u8; NONCE_BYTES] {
    let mut nonce = [0u8; NONCE_BYTES];
    // The system's generator fails only if the kernel has none: then there is no security to
    // keep, and a fixed challenge still lets a cluster without a secret work.
    let _ = SystemRandom::new().fill(&mut nonce);
    nonce
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why.to_owned())
}

/// The caller's side: sends `hello`, checks the listener's proof, proves itself.
pub async fn call(stream: &mut TcpStream, hello: &Hello, secret: &PeerSecret) -> io::Result<()> {
    let exchange = async {
        let hello = hello.encode();
        stream.write_all(&hello).await?;
        let mut answer = [0u8; NONCE_BYTES + PROOF_BYTES];
        stream.read_exact(&mut answer).await?;
        let (theirs, proof) = answer.split_at(NONCE_BYTES);
        let theirs: &[u8; NONCE_BYTES] = theirs.try_into().expect("split at the nonce's length");
        if !secret.verify(LISTENER, &hello, theirs, proof) {
            return Err(refused("the peer did not prove it holds the cluster secret (do the nodes' secrets differ?)"));
        }
        stream.write_all(secret.proof(CALLER, &hello, theirs).as_ref()).await
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange).await.unwrap_or_else(|_| Err(timed_out()))
}

/// The listener's side: reads the caller's hello, proves itself, checks the caller's proof.
/// Returns the hello once the caller proved it holds the secret.
pub async fn answer(stream: &mut TcpStream, secret: &PeerSecret) -> io::Result<Hello> {
    let exchange = async {
        let mut hello = [0u8; HELLO_BYTES];
        stream.read_exact(&mut hello).await?;
        let decoded = Hello::decode(&hello).map_err(io::Error::other)?;
        let ours = nonce();
        let mut answer = Vec::with_capacity(NONCE_BYTES + PROOF_BYTES);
        answer.extend_from_slice(&ours);
        answer.extend_from_slice(secret.proof(LISTENER, &hello, &ours).as_ref());
        stream.write_all(&answer).await?;
        let mut proof = [0u8; PROOF_BYTES];
        stream.read_exact(&mut proof).await?;
        if !secret.verify(CALLER, &hello, &ours, &proof) {
            return Err(refused("a peer did not prove it holds the cluster secret"));
        }
        Ok(decoded)
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange).await.unwrap_or_else(|_| Err(timed_out()))
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("the peer handshake took over {HANDSHAKE_TIMEOUT:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn handshake(caller: PeerSecret, listener: PeerSecret) -> (io::Result<()>, io::Result<Hello>) {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = server.local_addr().expect("address");
        let hello = Hello { group: 1, from: 2, to: 3, cluster: 9, nonce: nonce() };
        let accepting = async {
            let (mut stream, _) = server.accept().await.expect("accept");
            answer(&mut stream, &listener).await
        };
        let calling = async {
            let mut stream = TcpStream::connect(address).await.expect("connect");
            call(&mut stream, &hello, &caller).await
        };
        tokio::join!(calling, accepting)
    }

    #[tokio::test]
    async fn peers_with_the_same_secret_agree() {
        let secret = PeerSecret::new(Some(b"0123456789abcdef-shared"));
        let (called, answered) = handshake(secret.clone(), secret).await;
        called.expect("the caller accepts the listener");
        let hello = answered.expect("the listener accepts the caller");
        assert_eq!((hello.group, hello.from, hello.to, hello.cluster), (1, 2, 3, 9));
    }

    #[tokio::test]
    async fn a_caller_without_the_secret_is_refused_and_refuses() {
        let (called, answered) =
            handshake(PeerSecret::new(Some(b"the-wrong-secret-entirely")), PeerSecret::new(Some(b"0123456789abcdef")))
                .await;
        assert_eq!(called.expect_err("the listener's proof fails").kind(), io::ErrorKind::PermissionDenied);
        assert!(answered.is_err(), "the caller never proved itself");
        let (called, answered) = handshake(PeerSecret::new(None), PeerSecret::new(Some(b"0123456789abcdef"))).await;
        assert!(called.is_err() && answered.is_err(), "no secret against a secret");
    }

    #[tokio::test]
    async fn a_silent_caller_times_out() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = server.local_addr().expect("address");
        let _silent = TcpStream::connect(address).await.expect("connect");
        let (mut stream, _) = server.accept().await.expect("accept");
        let error = answer(&mut stream, &PeerSecret::new(None)).await.expect_err("nothing arrives");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn short_secret_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("ferrite-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let short = dir.join("short");
        std::fs::write(&short, "tooshort\n").expect("write");
        assert!(PeerSecret::load(&short).expect_err("short").contains("at least 16"));
        let good = dir.join("good");
        std::fs::write(&good, "0123456789abcdef0123\n").expect("write");
        assert!(PeerSecret::load(&good).expect("long enough").configured);
        let _ = std::fs::remove_dir_all(dir);
    }
}
