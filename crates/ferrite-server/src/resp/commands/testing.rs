//! What the command tests share: a RESP connection to a `memory` shard's listener, whose commands
//! run as a real connection runs them, and decoded replies.

use bytes::BytesMut;
use ferrite_proto::Limits;
use ferrite_store::StoreKind;

use super::{execute, Client};
use crate::cluster::view::ClusterMap;
use crate::cluster::ShardCluster;
use crate::config::RespConfig;
use crate::handler::tests::shard_state;
use crate::handler::{Flow, ShardState};
use crate::pools::Pools;
use crate::resp::parser::Args;
use crate::resp::{open_pool, Settings};
use crate::session::Session;

/// A RESP reply, decoded; maps and sets are their elements in order.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Value>),
}

impl Value {
    pub fn text(&self) -> String {
        match self {
            Value::Simple(text) | Value::Error(text) => text.clone(),
            Value::Bulk(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            other => panic!("not text: {other:?}"),
        }
    }

    pub fn items(&self) -> &[Value] {
        match self {
            Value::Array(items) => items,
            other => panic!("not an array: {other:?}"),
        }
    }

    pub fn int(&self) -> i64 {
        match self {
            Value::Int(value) => *value,
            other => panic!("not an integer: {other:?}"),
        }
    }

    /// The value under `key` in a map (read as its flat list of keys and values).
    pub fn field(&self, key: &str) -> &Value {
        let items = self.items();
        let at = (0..items.len()).step_by(2).find(|&at| items[at].text() == key);
        &items[at.unwrap_or_else(|| panic!("no field {key} in {self:?}")) + 1]
    }
}

/// Decodes one reply at the start of `bytes`: the value and the bytes it took.
pub(super) fn decode(bytes: &[u8]) -> (Value, usize) {
    let end = bytes.windows(2).position(|pair| pair == b"\r\n").expect("a whole line");
    let line = String::from_utf8_lossy(&bytes[1..end]).into_owned();
    let mut used = end + 2;
    let mut elements = |count: usize| {
        let mut items = Vec::new();
        for _ in 0..count {
            let (item, taken) = decode(&bytes[used..]);
            used += taken;
            items.push(item);
        }
        items
    };
    let value = match bytes[0] {
        b'+' => Value::Simple(line),
        b'-' => Value::Error(line),
        b':' => Value::Int(line.parse().expect("an integer")),
        b'_' => Value::Null,
        b'$' if line == "-1" => Value::Null,
        b'$' => {
            let len: usize = line.parse().expect("a length");
            let bulk = bytes[used..used + len].to_vec();
            used += len + 2;
            Value::Bulk(bulk)
        }
        b'*' | b'~' => Value::Array(elements(line.parse().expect("a count"))),
        b'%' => Value::Array(elements(2 * line.parse::<usize>().expect("a count"))),
        other => panic!("unknown reply type {:?}", other as char),
    };
    (value, used)
}

/// A RESP connection to a shard's listener.
pub(super) struct Connection {
    pub shard: ShardState,
    pub settings: Settings,
    pub client: Client,
}

impl Connection {
    pub fn single_server() -> Connection {
        Connection::over(None)
    }

    /// A connection to a listener of a shard in `cluster` (none: a single server).
    pub fn over(cluster: Option<ShardCluster>) -> Connection {
        let mut shard = shard_state(Pools::in_memory(StoreKind::HStore, 16), None);
        shard.cluster = cluster;
        let port = 6379 + shard.cluster.as_ref().map_or(0, |cluster| cluster.group as u16);
        let settings =
            Settings::new(&RespConfig::default(), 0, port, &Limits::MAX, crate::config::DIRECT_VALUE_BYTES_DEFAULT);
        let mut session = Session::for_server();
        let pool = open_pool(&mut shard, &settings, &mut session).expect("the default pool");
        shard.begin_identity(&mut session).expect("no users: everyone");
        Connection { shard, settings, client: Client::new(session, pool, 1) }
    }

    pub fn map(&self) -> &ClusterMap {
        &self.shard.cluster.as_ref().expect("cluster mode").map
    }

    /// Runs one command: how it went on, and its reply so far.
    pub fn run(&mut self, words: &[&str]) -> (Flow, BytesMut) {
        let source = words.concat().into_bytes();
        let mut ranges = Vec::new();
        for word in words {
            let start = ranges.last().map_or(0, |range: &std::ops::Range<usize>| range.end);
            ranges.push(start..start + word.len());
        }
        let mut out = BytesMut::new();
        let flow = execute(Args::new(&source, &ranges), &mut self.client, &mut self.shard, &self.settings, 1, &mut out);
        (flow, out)
    }

    /// Runs one command answered at once, and decodes its reply.
    pub fn send(&mut self, words: &[&str]) -> Value {
        let (flow, out) = self.run(words);
        assert!(matches!(flow, Flow::Continue), "{words:?} answered at once");
        let (value, used) = decode(&out);
        assert_eq!(used, out.len(), "{words:?}: one reply");
        value
    }
}

pub(super) fn error(text: &str) -> Value {
    Value::Error(text.to_owned())
}

pub(super) fn ok() -> Value {
    Value::Simple("OK".to_owned())
}
