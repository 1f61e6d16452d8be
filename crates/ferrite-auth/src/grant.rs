//! A grant: rights on the pools a pattern names. A pattern is a pool name (`orders`), a prefix
//! ending in `*` (`orders*` names `orders`, `orders-2026`, ...), or `*` alone (every pool).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::rights::Rights;

/// Which pools a grant covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolPattern(String);

impl PoolPattern {
    /// Checks `pattern`: a `*` may only end it, and a pool name is at most 255 bytes.
    pub fn new(pattern: &str) -> Result<PoolPattern, String> {
        let stem = pattern.strip_suffix('*').unwrap_or(pattern);
        if pattern.is_empty() {
            return Err("an empty pool pattern names no pool (use '*' for every pool)".into());
        }
        if stem.contains('*') {
            return Err(format!("pool pattern '{pattern}': '*' may only end a pattern"));
        }
        if stem.len() > 255 {
            return Err(format!("pool pattern '{pattern}' is longer than a pool name may be (255 bytes)"));
        }
        Ok(PoolPattern(pattern.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, pool: &str) -> bool {
        match self.0.strip_suffix('*') {
            Some(prefix) => pool.starts_with(prefix),
            None => self.0 == pool,
        }
    }

    /// Whether this pattern covers every pool.
    pub fn is_everything(&self) -> bool {
        self.0 == "*"
    }
}

impl fmt::Display for PoolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for PoolPattern {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PoolPattern {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<PoolPattern, D::Error> {
        PoolPattern::new(&String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// Rights on the pools a pattern names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub pools: PoolPattern,
    pub rights: Rights,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_exact_names_prefixes_and_everything() {
        let exact = PoolPattern::new("orders").expect("valid");
        assert!(exact.matches("orders") && !exact.matches("orders-2026") && !exact.matches("order"));
        let prefix = PoolPattern::new("orders*").expect("valid");
        assert!(prefix.matches("orders") && prefix.matches("orders-2026") && !prefix.matches("order"));
        let every = PoolPattern::new("*").expect("valid");
        assert!(every.matches("anything") && every.is_everything() && !prefix.is_everything());
    }

    #[test]
    fn a_star_inside_a_pattern_or_an_empty_one_is_refused() {
        assert!(PoolPattern::new("ord*ers").is_err());
        assert!(PoolPattern::new("**").is_err());
        assert!(PoolPattern::new("").is_err());
    }
}
