//! What a grant allows on a pool. `read`: get, count, attributes, find. `write`: put, erase.
//! `invoke`: run the pool's plugins (which also needs `read` for a read-only call, `write`
//! otherwise: a plugin acts with its caller's rights). `admin`: create, delete and configure
//! pools, and back the server up (on every pool, `*`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A set of rights, as bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Rights(u8);

impl Rights {
    pub const NONE: Rights = Rights(0);
    pub const READ: Rights = Rights(1);
    pub const WRITE: Rights = Rights(2);
    pub const INVOKE: Rights = Rights(4);
    pub const ADMIN: Rights = Rights(8);
    pub const ALL: Rights = Rights(15);

    /// Each right with its name, in the order they are written.
    pub const NAMED: [(Rights, &'static str); 4] =
        [(Rights::READ, "read"), (Rights::WRITE, "write"), (Rights::INVOKE, "invoke"), (Rights::ADMIN, "admin")];

    pub fn contains(self, other: Rights) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn union(self, other: Rights) -> Rights {
        Rights(self.0 | other.0)
    }

    pub fn without(self, other: Rights) -> Rights {
        Rights(self.0 & !other.0)
    }

    /// The names of the rights in this set, in their usual order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Rights::NAMED.into_iter().filter(move |(right, _)| self.contains(*right)).map(|(_, name)| name)
    }

    /// One right by name (`read`, `write`, `invoke`, `admin`) or `all`.
    pub fn from_name(name: &str) -> Result<Rights, String> {
        if name == "all" {
            return Ok(Rights::ALL);
        }
        Rights::NAMED
            .into_iter()
            .find(|(_, known)| *known == name)
            .map(|(right, _)| right)
            .ok_or_else(|| format!("unknown right '{name}' (expected read, write, invoke, admin or all)"))
    }

    /// A comma-separated list of rights, as `ferrite user grant` takes it: `read,write`.
    pub fn parse_list(list: &str) -> Result<Rights, String> {
        let rights = list
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .try_fold(Rights::NONE, |rights, name| Rights::from_name(name).map(|right| rights.union(right)))?;
        if rights.is_empty() {
            return Err("no rights given (expected e.g. read,write)".into());
        }
        Ok(rights)
    }
}

impl fmt::Display for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = self.names().collect();
        f.write_str(&names.join(","))
    }
}

impl Serialize for Rights {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.names())
    }
}

impl<'de> Deserialize<'de> for Rights {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rights, D::Error> {
        let names = Vec::<String>::deserialize(deserializer)?;
        names.iter().try_fold(Rights::NONE, |rights, name| {
            Rights::from_name(name).map(|right| rights.union(right)).map_err(serde::de::Error::custom)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_to_sets_and_print_back_in_order() {
        let rights = Rights::parse_list("write, read").expect("valid");
        assert!(rights.contains(Rights::READ) && rights.contains(Rights::WRITE));
        assert!(!rights.contains(Rights::INVOKE));
        assert_eq!(rights.to_string(), "read,write");
        assert_eq!(Rights::parse_list("all").expect("valid"), Rights::ALL);
        assert_eq!(Rights::ALL.without(Rights::ADMIN).to_string(), "read,write,invoke");
    }

    #[test]
    fn unknown_or_empty_lists_are_refused_with_the_name() {
        assert!(Rights::parse_list("read,delete").expect_err("unknown").contains("'delete'"));
        assert!(Rights::parse_list(" , ").is_err());
    }
}
