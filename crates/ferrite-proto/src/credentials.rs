//! What a `hello`'s `auth` field carries: nothing (no credentials; over mutual TLS the client
//! certificate may still name a user), or a user name and its password. The layout is documented
//! in `docs/protocol.md` under `hello`.

use bytes::{BufMut, BytesMut};

use crate::error::ProtocolError;
use crate::wire::{put_bytes16, put_str16, Reader};

/// The one way of authenticating `auth` carries today.
const METHOD_PASSWORD: u8 = 1;

/// A user name and password, as a `hello` carries them.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials<'a> {
    pub user: &'a str,
    pub password: &'a [u8],
}

impl std::fmt::Debug for Credentials<'_> {
    /// Names the user, never shows the password (logs and panics print `Debug`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).finish_non_exhaustive()
    }
}

impl<'a> Credentials<'a> {
    /// The `auth` bytes for these credentials.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = BytesMut::with_capacity(5 + self.user.len() + self.password.len());
        out.put_u8(METHOD_PASSWORD);
        put_str16(&mut out, self.user);
        put_bytes16(&mut out, self.password);
        out.to_vec()
    }

    /// The credentials `auth` carries: `None` for an empty field.
    pub fn decode(auth: &'a [u8]) -> Result<Option<Credentials<'a>>, ProtocolError> {
        if auth.is_empty() {
            return Ok(None);
        }
        let mut reader = Reader::new(auth);
        let method = reader.u8()?;
        if method != METHOD_PASSWORD {
            return Err(ProtocolError::InvalidField { field: "auth method", value: u64::from(method) });
        }
        let user = reader.str16("user")?;
        let password = reader.bytes16()?;
        reader.finish()?;
        Ok(Some(Credentials { user, password }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_round_trip_and_empty_auth_carries_none() {
        let credentials = Credentials { user: "alice", password: b"s3cret \x00 bytes" };
        let auth = credentials.encode();
        assert_eq!(Credentials::decode(&auth).expect("decodes"), Some(credentials));
        assert_eq!(Credentials::decode(b"").expect("decodes"), None);
    }

    #[test]
    fn malformed_auth_is_refused_and_debug_hides_the_password() {
        let auth = Credentials { user: "alice", password: b"hunter22" }.encode();
        assert!(Credentials::decode(&auth[..auth.len() - 1]).is_err(), "truncated");
        let mut trailing = auth.clone();
        trailing.push(0);
        assert!(Credentials::decode(&trailing).is_err(), "trailing bytes");
        let mut other_method = auth.clone();
        other_method[0] = 2;
        assert!(Credentials::decode(&other_method).is_err(), "unknown method");
        let shown = format!("{:?}", Credentials::decode(&auth).expect("decodes"));
        assert!(shown.contains("alice") && !shown.contains("hunter22"), "{shown}");
    }
}
