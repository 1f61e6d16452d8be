//! Secrets and certificates. A password is stored only as an argon2id PHC string
//! (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`): a slow, memory-hard KDF, so a stolen users
//! file does not give its passwords away cheaply. A client certificate is known by the SHA-256 of
//! its DER encoding, which only the holder of its private key can present in a TLS handshake.

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

/// The shortest secret `ferrite user add` accepts.
pub const SECRET_BYTES_MIN: usize = 8;

/// The argon2id PHC string of `secret`, with a fresh random salt and argon2's default costs
/// (19 MiB, 2 passes: OWASP's recommendation).
pub fn hash_secret(secret: &[u8]) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(secret, &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| format!("cannot hash the secret: {error}"))
}

/// Whether `secret` is the one `phc` was made from. Takes as long as the hash's costs say (tens
/// of milliseconds): the server runs it off its shards' threads.
pub fn verify_secret(phc: &str, secret: &[u8]) -> bool {
    PasswordHash::new(phc).is_ok_and(|hash| Argon2::default().verify_password(secret, &hash).is_ok())
}

/// Checks that `phc` is an argon2 PHC string this crate can verify.
pub fn check_hash(phc: &str) -> Result<(), String> {
    let hash = PasswordHash::new(phc).map_err(|error| format!("not a PHC password hash: {error}"))?;
    if !hash.algorithm.as_str().starts_with("argon2") {
        return Err(format!("password hash uses '{}', not argon2", hash.algorithm));
    }
    Ok(())
}

/// The fingerprint a users file knows a client certificate by: the lowercase hex SHA-256 of its
/// DER encoding.
pub fn certificate_fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    digest.as_ref().iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Checks that `fingerprint` looks like one [`certificate_fingerprint`] makes.
pub fn check_fingerprint(fingerprint: &str) -> Result<(), String> {
    let valid =
        fingerprint.len() == 64 && fingerprint.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !valid {
        return Err(format!("certificate fingerprint '{fingerprint}' is not 64 lowercase hex digits (SHA-256)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hashed_secret_verifies_only_with_itself() {
        let phc = hash_secret(b"correct horse").expect("hashes");
        assert!(phc.starts_with("$argon2id$"));
        check_hash(&phc).expect("valid");
        assert!(verify_secret(&phc, b"correct horse"));
        assert!(!verify_secret(&phc, b"correct horsE"));
        assert!(!verify_secret("not a hash", b"correct horse"));
        assert_ne!(hash_secret(b"correct horse").expect("hashes"), phc, "every hash has its own salt");
    }

    #[test]
    fn fingerprints_are_sha256_in_hex() {
        let fingerprint = certificate_fingerprint(b"abc");
        assert_eq!(fingerprint, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        check_fingerprint(&fingerprint).expect("valid");
        assert!(check_fingerprint("BA78").is_err());
    }
}
