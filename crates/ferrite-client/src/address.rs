//! Turning the shard addresses a server announces into addresses this client can dial.

use std::net::{IpAddr, SocketAddr};

use crate::error::{Error, Result};

/// Resolves one `host:port` from a hello reply.
///
/// A server listening on all interfaces announces `0.0.0.0` or `::`, which is not an address
/// anyone can connect to; the protocol says it means "the host you connected to". We substitute
/// the IP the first connection actually reached (not the name the user typed), so every shard is
/// dialled at the same address family and host even if a name resolves to several.
pub(crate) fn resolve_shard_address(announced: &str, connected_ip: IpAddr) -> Result<String> {
    let (host, port) = split_host_port(announced).ok_or_else(|| {
        Error::UnexpectedResponse(format!("shard address {announced:?} is not of the form host:port"))
    })?;
    let unspecified = host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified());
    if unspecified {
        return Ok(SocketAddr::new(connected_ip, port).to_string());
    }
    Ok(announced.to_owned())
}

/// Splits `host:port`, `[v6]:port` or a bare `v6:port` (as in `:::7001`) at the last colon.
fn split_host_port(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    (!host.is_empty()).then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const V4: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));

    #[test]
    fn unspecified_v4_host_means_the_host_we_reached() {
        assert_eq!(resolve_shard_address("0.0.0.0:7001", V4).ok().as_deref(), Some("10.1.2.3:7001"));
    }

    #[test]
    fn unspecified_v6_host_in_any_spelling_means_the_host_we_reached() {
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(resolve_shard_address("[::]:7002", v6).ok().as_deref(), Some("[::1]:7002"));
        assert_eq!(resolve_shard_address(":::7002", v6).ok().as_deref(), Some("[::1]:7002"));
        assert_eq!(resolve_shard_address("[::]:7002", V4).ok().as_deref(), Some("10.1.2.3:7002"));
    }

    #[test]
    fn concrete_hosts_are_kept_as_announced() {
        assert_eq!(resolve_shard_address("127.0.0.1:9", V4).ok().as_deref(), Some("127.0.0.1:9"));
        assert_eq!(resolve_shard_address("db-7.example:9", V4).ok().as_deref(), Some("db-7.example:9"));
        assert_eq!(resolve_shard_address("[fe80::1]:9", V4).ok().as_deref(), Some("[fe80::1]:9"));
    }

    #[test]
    fn malformed_addresses_are_refused() {
        for bad in ["", "7001", "host:", ":7001", "host:port", "host:70000"] {
            assert!(resolve_shard_address(bad, V4).is_err(), "{bad:?} should be refused");
        }
    }
}
