//! Owned copies of decoded responses.
//!
//! `ferrite_proto::Response` borrows from the frame it was decoded from. The reader task must hand
//! each response to another task, so it is converted here into a value that owns its data. Values
//! stay zero-copy: they are slices of the frame body, and the copy into the caller's `Vec` happens
//! on the caller's task rather than on the single reader task.

use bytes::Bytes;
use ferrite_proto::{
    ClusterMap, ClusterStatus, Header, Limits, NodeInfo, PoolHandle, PoolInfo, PoolMemory, PoolSettings, Response,
    PROTOCOL_VERSION,
};

use crate::error::{Error, Result};
use crate::pool::InvokeResponse;

/// What a shard said in its hello reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) shard_index: u16,
    pub(crate) limits: Limits,
    /// As the server sent them; see [`crate::address::resolve_shard_address`].
    pub(crate) shard_addresses: Vec<String>,
}

/// One row of `list_pools`, before the session adds the shard index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolRow {
    pub(crate) name: String,
    pub(crate) objects: u64,
    pub(crate) size_bytes: u64,
    pub(crate) used_bytes: u64,
    pub(crate) open_count: u32,
    pub(crate) memory: PoolMemory,
    pub(crate) plugins: Vec<String>,
    /// `None` in a plain listing; a described one carries them.
    pub(crate) settings: Option<PoolSettings>,
}

impl PoolRow {
    fn new(info: &PoolInfo<'_>, settings: Option<PoolSettings>) -> PoolRow {
        PoolRow {
            name: info.name.to_owned(),
            objects: info.objects,
            size_bytes: info.size_bytes,
            used_bytes: info.used_bytes,
            open_count: info.open_count,
            memory: info.memory,
            plugins: ferrite_proto::plugin_names(info.plugins).map(str::to_owned).collect(),
            settings,
        }
    }
}

/// A successful response, owning its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Hello(Hello),
    PoolCreated { pool: PoolHandle, created: bool },
    PoolOpened { pool: PoolHandle },
    PoolClosed,
    PoolDeleted,
    PoolConfigured,
    Pools(Vec<PoolRow>),
    Stored,
    Value(Bytes),
    Erased,
    Count(u64),
    Attribute(u64),
    Found { keys: Vec<Bytes>, next: Option<Bytes> },
    Statistics(Vec<(String, u64)>),
    Invoked(Vec<InvokeResponse>),
    BackedUp(ferrite_proto::BackupReport),
    TransferOpened { length: u64 },
    Written,
    TransferEnded,
    NodeInfo(NodeInfo),
    ClusterMap(ClusterMap),
    ClusterInitialized,
    NodeAdded,
    NodeRemoved,
    LeaderTransferred,
    ClusterStatus(ClusterStatus),
}

impl Reply {
    /// Decodes one response frame. An error frame becomes [`Error::Server`], a `not_leader` one
    /// [`Error::NotLeader`]; a body that does not
    /// decode becomes [`Error::UnexpectedResponse`], failing only the request it answers (the
    /// header was sound, so the stream is still in step).
    pub(crate) fn decode(header: &Header, body: &Bytes) -> Result<Reply> {
        let response = Response::decode(header, body).map_err(|error| {
            Error::UnexpectedResponse(format!(
                "reply to request {} (opcode {:#06x}) does not decode: {error}",
                header.request_id, header.opcode
            ))
        })?;
        Ok(match response {
            Response::Error { code, message } => {
                return Err(Error::Server { code, message: message.to_owned() });
            }
            Response::NotLeader(refusal) => return Err(Error::NotLeader(Box::new(refusal))),
            Response::Hello(reply) => {
                if reply.version != PROTOCOL_VERSION {
                    return Err(Error::UnexpectedResponse(format!(
                        "server speaks protocol version {}, this client speaks {PROTOCOL_VERSION}",
                        reply.version
                    )));
                }
                Reply::Hello(Hello {
                    shard_index: reply.shard_index,
                    limits: reply.limits,
                    shard_addresses: reply.shard_addresses.iter().map(|a| (*a).to_owned()).collect(),
                })
            }
            Response::PoolCreated { pool, created } => Reply::PoolCreated { pool, created },
            Response::PoolOpened { pool } => Reply::PoolOpened { pool },
            Response::PoolClosed => Reply::PoolClosed,
            Response::PoolDeleted => Reply::PoolDeleted,
            Response::PoolConfigured => Reply::PoolConfigured,
            Response::Pools(pools) => Reply::Pools(pools.iter().map(|info| PoolRow::new(info, None)).collect()),
            Response::PoolDescriptions(pools) => {
                Reply::Pools(pools.iter().map(|pool| PoolRow::new(&pool.info, Some(pool.settings))).collect())
            }
            Response::Stored => Reply::Stored,
            Response::Value(value) => Reply::Value(body.slice_ref(value)),
            Response::Erased => Reply::Erased,
            Response::Count(count) => Reply::Count(count),
            Response::Attribute(value) => Reply::Attribute(value),
            Response::Found { keys, next } => Reply::Found {
                keys: keys.into_iter().map(|key| body.slice_ref(key)).collect(),
                next: next.map(|key| body.slice_ref(key)),
            },
            Response::BackedUp(report) => Reply::BackedUp(report),
            Response::TransferOpened { length } => Reply::TransferOpened { length },
            Response::Written => Reply::Written,
            Response::TransferEnded => Reply::TransferEnded,
            Response::Statistics(stats) => {
                Reply::Statistics(stats.into_iter().map(|s| (s.name.to_owned(), s.value)).collect())
            }
            Response::Invoked { buffers } => Reply::Invoked(
                buffers
                    .into_iter()
                    .map(|buffer| InvokeResponse { layer: buffer.layer, data: body.slice_ref(buffer.data) })
                    .collect(),
            ),
            Response::NodeInfo(info) => Reply::NodeInfo(info),
            Response::ClusterMap(map) => Reply::ClusterMap(map),
            Response::ClusterInitialized => Reply::ClusterInitialized,
            Response::NodeAdded => Reply::NodeAdded,
            Response::NodeRemoved => Reply::NodeRemoved,
            Response::LeaderTransferred => Reply::LeaderTransferred,
            Response::ClusterStatus(status) => Reply::ClusterStatus(status),
        })
    }

    /// Short name for error messages about a reply of the wrong type.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Reply::Hello(_) => "hello",
            Reply::PoolCreated { .. } => "pool_created",
            Reply::PoolOpened { .. } => "pool_opened",
            Reply::PoolClosed => "pool_closed",
            Reply::PoolDeleted => "pool_deleted",
            Reply::PoolConfigured => "pool_configured",
            Reply::Pools(_) => "pools",
            Reply::Stored => "stored",
            Reply::Value(_) => "value",
            Reply::Erased => "erased",
            Reply::Count(_) => "count",
            Reply::Attribute(_) => "attribute",
            Reply::Found { .. } => "found",
            Reply::Statistics(_) => "statistics",
            Reply::Invoked(_) => "invoked",
            Reply::BackedUp(_) => "backed_up",
            Reply::TransferOpened { .. } => "transfer_opened",
            Reply::Written => "written",
            Reply::TransferEnded => "transfer_ended",
            Reply::NodeInfo(_) => "node_info",
            Reply::ClusterMap(_) => "cluster_map",
            Reply::ClusterInitialized => "cluster_initialized",
            Reply::NodeAdded => "node_added",
            Reply::NodeRemoved => "node_removed",
            Reply::LeaderTransferred => "leader_transferred",
            Reply::ClusterStatus(_) => "cluster_status",
        }
    }

    /// The error for a reply that answers a request of another type.
    pub(crate) fn unexpected(self, expected: &str) -> Error {
        Error::UnexpectedResponse(format!("expected a {expected} reply, got {}", self.kind()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use ferrite_proto::{ErrorCode, HelloReply, HEADER_BYTES};

    fn round_trip(response: &Response<'_>) -> Result<Reply> {
        let mut frame = BytesMut::new();
        response.encode(3, &mut frame);
        let header = Header::parse(&frame).expect("encoded frame has a header");
        let body = frame.split_off(HEADER_BYTES).freeze();
        Reply::decode(&header, &body)
    }

    #[test]
    fn error_frames_become_server_errors() {
        let error = round_trip(&Response::Error { code: ErrorCode::PoolNotFound, message: "no pool 'x'" })
            .expect_err("an error frame is an error");
        assert!(
            matches!(error, Error::Server { code: ErrorCode::PoolNotFound, ref message } if message == "no pool 'x'")
        );
    }

    #[test]
    fn values_and_lists_are_owned() {
        assert_eq!(round_trip(&Response::Value(b"abc")).ok(), Some(Reply::Value(Bytes::from_static(b"abc"))));
        let stats = [ferrite_proto::Statistic { name: "puts", value: 7 }];
        assert_eq!(
            round_trip(&Response::Statistics(stats.to_vec())).ok(),
            Some(Reply::Statistics(vec![("puts".to_owned(), 7)]))
        );
    }

    #[test]
    fn hello_of_another_version_is_refused() {
        let other = ferrite_proto::PROTOCOL_VERSION + 1;
        let reply = HelloReply { version: other, shard_index: 0, limits: Limits::MAX, shard_addresses: vec!["a:1"] };
        let error = round_trip(&Response::Hello(reply)).expect_err("another version is not ours");
        assert!(error.to_string().contains(&format!("protocol version {other}")), "{error}");
    }

    #[test]
    fn undecodable_body_is_an_unexpected_response() {
        let header = Header { body_len: 1, opcode: 0x8023, flags: 0, request_id: 4 };
        let error = Reply::decode(&header, &Bytes::from_static(&[0])).expect_err("count needs 8 bytes");
        assert!(matches!(error, Error::UnexpectedResponse(_)), "{error}");
    }
}
