//! `COMMAND`: the command table as Redis gives it, derived from [`COMMANDS`] and [`SUBCOMMANDS`],
//! so that it lists what the listener serves and nothing else. Each entry is `[name, arity, flags,
//! first key, last key, step, ACL categories, tips, key specifications, subcommands]`. Cluster
//! clients read where each command's keys are from it (redis-py's `RedisCluster` reads it when it
//! starts, and asks `COMMAND GETKEYS` for the rest); `redis-cli` asks for `COMMAND DOCS`.
//!
//! What is derived: the flags `write` or `readonly` and the categories `@write` or `@read` of a
//! command with keys (from whether it writes them), `no_auth` for what a client may send before it
//! authenticates; the key positions and specifications from [`Keys`]. Tips come from [`TIPS`].

use bytes::BytesMut;

use super::reply::{self, Protocol};
use super::{
    lookup, subcommand, subcommands_of, Args, Call, Keys, RespError, Spec, Subcommand, BEFORE_AUTHENTICATION, COMMANDS,
};
use crate::handler::Flow;

pub(super) static COMMAND: [Subcommand; 6] = [
    Subcommand { name: "count", arity: 2, run: count },
    Subcommand { name: "docs", arity: -2, run: docs },
    Subcommand { name: "info", arity: -2, run: info },
    Subcommand { name: "list", arity: -2, run: list },
    Subcommand { name: "getkeys", arity: -4, run: getkeys },
    Subcommand { name: "getkeysandflags", arity: -4, run: getkeysandflags },
];

/// Redis's tips for the commands that have any: how a cluster client may split a command by the
/// slots of its keys (`multi_shard`) or send it to every shard (`all_shards`), and combine the
/// replies.
static TIPS: &[(&str, &[&str])] = &[
    ("mget", &["request_policy:multi_shard"]),
    ("mset", &["request_policy:multi_shard", "response_policy:all_succeeded"]),
    ("del", &["request_policy:multi_shard", "response_policy:agg_sum"]),
    ("unlink", &["request_policy:multi_shard", "response_policy:agg_sum"]),
    ("exists", &["request_policy:multi_shard", "response_policy:agg_sum"]),
    ("touch", &["request_policy:multi_shard", "response_policy:agg_sum"]),
    ("keys", &["request_policy:all_shards", "nondeterministic_output_order"]),
    ("dbsize", &["request_policy:all_shards", "response_policy:agg_sum"]),
    ("scan", &["nondeterministic_output", "request_policy:special"]),
    ("ping", &["request_policy:all_shards", "response_policy:all_succeeded"]),
    ("info", &["nondeterministic_output", "request_policy:all_shards", "response_policy:special"]),
    ("time", &["nondeterministic_output"]),
    ("wait", &["request_policy:all_shards", "response_policy:agg_min"]),
];

/// `COMMAND`: every command's entry; `COMMAND <subcommand> ...` otherwise.
pub(super) fn command(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    if call.args.len() > 1 {
        return subcommand(call, "command");
    }
    reply::array(call.out, COMMANDS.len());
    for spec in COMMANDS {
        entry(call.out, call.client.protocol, spec);
    }
    Ok(Flow::Continue)
}

fn count(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    reply::integer(call.out, COMMANDS.len() as i64);
    Ok(Flow::Continue)
}

/// `COMMAND DOCS`: no documentation; an empty answer is a valid one (`redis-cli` asks for hints it
/// can do without).
fn docs(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    reply::map(call.out, 0, call.client.protocol);
    Ok(Flow::Continue)
}

/// `COMMAND INFO [name ...]`: the entries of the commands named (`container|subcommand` names a
/// subcommand), nil for those not served; every command's without a name.
fn info(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let names = call.args.skip(2);
    if names.len() == 0 {
        return command(call);
    }
    reply::array(call.out, names.len());
    for name in names.iter() {
        let text = String::from_utf8_lossy(name).to_lowercase();
        match text.split_once('|') {
            None => match lookup(name) {
                Some(spec) => entry(call.out, call.client.protocol, spec),
                None => reply::null(call.out, call.client.protocol),
            },
            Some((container, name)) => {
                match subcommands_of(container).iter().find(|subcommand| subcommand.name == name) {
                    Some(subcommand) => subcommand_entry(call.out, call.client.protocol, container, subcommand),
                    None => reply::null(call.out, call.client.protocol),
                }
            }
        }
    }
    Ok(Flow::Continue)
}

/// `COMMAND LIST`: every command's name.
fn list(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    reply::array(call.out, COMMANDS.len());
    for spec in COMMANDS {
        reply::bulk(call.out, spec.name.as_bytes());
    }
    Ok(Flow::Continue)
}

/// The keys of the command `COMMAND GETKEYS` and `GETKEYSANDFLAGS` name (their arguments from the
/// third), and whether it writes them; Redis's errors for a command that is not served, has no
/// keys, or is given a wrong number of arguments.
fn keys_of<'a>(call: &Call<'a, '_>) -> Result<(Vec<&'a [u8]>, bool), RespError> {
    let command: Args<'a> = call.args.skip(2);
    let spec = lookup(command.get(0)).ok_or_else(|| RespError::err("Invalid command specified"))?;
    if matches!(spec.keys, Keys::None) {
        return Err(RespError::err("The command has no key arguments"));
    }
    if !spec.accepts(command.len()) {
        return Err(RespError::err("Invalid number of arguments specified for command"));
    }
    let (keys, writes) = spec.keys.of(command);
    let keys: Vec<&[u8]> = keys.collect();
    if keys.is_empty() {
        return Err(RespError::err("Invalid arguments specified for command"));
    }
    Ok((keys, writes))
}

fn getkeys(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (keys, _) = keys_of(call)?;
    reply::array(call.out, keys.len());
    for key in keys {
        reply::bulk(call.out, key);
    }
    Ok(Flow::Continue)
}

/// `COMMAND GETKEYSANDFLAGS`: each key with the flags of its key specification.
fn getkeysandflags(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (keys, writes) = keys_of(call)?;
    reply::array(call.out, keys.len());
    for key in keys {
        reply::array(call.out, 2);
        reply::bulk(call.out, key);
        simple_set(call.out, call.client.protocol, key_flags(writes));
    }
    Ok(Flow::Continue)
}

/// The flags of a key specification: keys read, or read and written.
fn key_flags(writes: bool) -> &'static [&'static str] {
    if writes {
        &["RW", "access", "update"]
    } else {
        &["RO", "access"]
    }
}

/// A set of status strings (flags, categories).
fn simple_set(out: &mut BytesMut, protocol: Protocol, items: &[&str]) {
    reply::set(out, items.len(), protocol);
    for item in items {
        reply::simple(out, item);
    }
}

/// Writes a map of integer fields.
fn integers(out: &mut BytesMut, protocol: Protocol, fields: &[(&str, i64)]) {
    reply::map(out, fields.len(), protocol);
    for (name, value) in fields {
        reply::bulk(out, name.as_bytes());
        reply::integer(out, *value);
    }
}

/// The key specifications of `keys`, as Redis 7 gives them: where the search for keys begins
/// (an index) and how keys are found from there (a range: the last key relative to the first,
/// negative from the end, and the step). A fixed number of keys is one specification per key.
fn key_specs(out: &mut BytesMut, protocol: Protocol, keys: Keys) {
    let (first, last, step) = keys.positions();
    let specs: Vec<(i64, i64, i64)> = match (first, last) {
        (0, _) => Vec::new(),
        (first, last) if last < 0 => vec![(first, last, step)],
        (first, last) => (first..=last).step_by(step as usize).map(|index| (index, 0, 1)).collect(),
    };
    reply::array(out, specs.len());
    for (index, last_key, key_step) in specs {
        reply::map(out, 3, protocol);
        reply::bulk(out, b"flags");
        simple_set(out, protocol, key_flags(keys.writes()));
        reply::bulk(out, b"begin_search");
        reply::map(out, 2, protocol);
        reply::bulk(out, b"type");
        reply::bulk(out, b"index");
        reply::bulk(out, b"spec");
        integers(out, protocol, &[("index", index)]);
        reply::bulk(out, b"find_keys");
        reply::map(out, 2, protocol);
        reply::bulk(out, b"type");
        reply::bulk(out, b"range");
        reply::bulk(out, b"spec");
        integers(out, protocol, &[("lastkey", last_key), ("keystep", key_step), ("limit", 0)]);
    }
}

/// One command's entry (see the module's comment).
fn entry(out: &mut BytesMut, protocol: Protocol, spec: &Spec) {
    let keyed = !matches!(spec.keys, Keys::None);
    let writes = spec.keys.writes();
    let mut flags = Vec::new();
    let mut categories = Vec::new();
    if keyed {
        flags.push(if writes { "write" } else { "readonly" });
        categories.push(if writes { "@write" } else { "@read" });
    }
    if BEFORE_AUTHENTICATION.contains(&spec.name) {
        flags.push("no_auth");
    }
    let (first, last, step) = spec.keys.positions();
    reply::array(out, 10);
    reply::bulk(out, spec.name.as_bytes());
    reply::integer(out, i64::from(spec.arity));
    simple_set(out, protocol, &flags);
    reply::integer(out, first);
    reply::integer(out, last);
    reply::integer(out, step);
    simple_set(out, protocol, &categories);
    let tips = TIPS.iter().find(|(name, _)| *name == spec.name).map_or(&[][..], |(_, tips)| tips);
    reply::array(out, tips.len());
    for tip in tips {
        reply::bulk(out, tip.as_bytes());
    }
    key_specs(out, protocol, spec.keys);
    let subcommands = subcommands_of(spec.name);
    reply::array(out, subcommands.len());
    for subcommand in subcommands {
        subcommand_entry(out, protocol, spec.name, subcommand);
    }
}

/// A subcommand's entry, named `container|subcommand`: subcommands have no keys.
fn subcommand_entry(out: &mut BytesMut, protocol: Protocol, container: &str, subcommand: &Subcommand) {
    reply::array(out, 10);
    reply::bulk(out, format!("{container}|{}", subcommand.name).as_bytes());
    reply::integer(out, i64::from(subcommand.arity));
    simple_set(out, protocol, &[]);
    for _ in 0..3 {
        reply::integer(out, 0);
    }
    simple_set(out, protocol, &[]);
    for _ in 0..3 {
        reply::array(out, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{error, Connection, Value};
    use super::*;

    /// Arguments `a1 a2 ...` after `name`, `count` in all (the name included).
    fn words(name: &str, count: usize) -> Vec<String> {
        std::iter::once(name.to_owned()).chain((1..count).map(|i| format!("a{i}"))).collect()
    }

    fn send(connection: &mut Connection, words: &[String]) -> Value {
        connection.send(&words.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Every command served has its entry, in Redis's shape, and the keys its positions name are
    /// the keys the command acts on (and is routed by): for each command, with each number of
    /// arguments it accepts up to 7, `COMMAND GETKEYS` (from the table) and the positions agree.
    #[test]
    fn every_command_has_an_entry_whose_key_positions_find_its_keys() {
        let mut connection = Connection::single_server();
        let table = connection.send(&["COMMAND"]);
        assert_eq!(table.items().len(), COMMANDS.len());
        assert_eq!(connection.send(&["COMMAND", "COUNT"]), Value::Int(COMMANDS.len() as i64));
        for (spec, entry) in COMMANDS.iter().zip(table.items()) {
            let fields = entry.items();
            assert_eq!(fields.len(), 10, "{}", spec.name);
            assert_eq!(fields[0].text(), spec.name);
            assert_eq!(fields[1].int(), i64::from(spec.arity));
            let flags: Vec<String> = fields[2].items().iter().map(Value::text).collect();
            let (first, last, step) = (fields[3].int(), fields[4].int(), fields[5].int());
            let keyed = first > 0;
            assert_eq!(keyed, !matches!(spec.keys, Keys::None), "{}", spec.name);
            assert_eq!(flags.contains(&"write".to_owned()), keyed && spec.keys.writes(), "{}: {flags:?}", spec.name);
            assert_eq!(
                flags.contains(&"readonly".to_owned()),
                keyed && !spec.keys.writes(),
                "{}: {flags:?}",
                spec.name
            );
            assert_eq!(fields[8].items().is_empty(), !keyed, "{}: key specifications", spec.name);
            for count in (1..=7).filter(|&count| spec.accepts(count) && keyed) {
                let args = words(spec.name, count);
                let end = if last < 0 { count as i64 + last + 1 } else { last + 1 };
                let expected: Vec<Value> = (first..end.min(count as i64))
                    .step_by(step as usize)
                    .map(|at| Value::Bulk(args[at as usize].clone().into_bytes()))
                    .collect();
                let getkeys =
                    send(&mut connection, &[&["COMMAND".to_owned(), "GETKEYS".to_owned()][..], &args].concat());
                assert_eq!(getkeys, Value::Array(expected), "{} with {count} arguments", spec.name);
            }
        }
        let client = &table.items()[COMMANDS.iter().position(|spec| spec.name == "client").expect("client")];
        let subcommands: Vec<String> = client.items()[9].items().iter().map(|entry| entry.items()[0].text()).collect();
        assert_eq!(subcommands, ["client|setname", "client|getname", "client|setinfo", "client|id"]);
    }

    /// `GET`'s entry, whole, as Redis 7 gives it (but for the categories and flags Ferrite does not
    /// derive: `fast`, `@string`).
    #[test]
    fn an_entry_in_full() {
        let mut connection = Connection::single_server();
        let simple = |text: &str| Value::Simple(text.to_owned());
        let bulk = |text: &str| Value::Bulk(text.as_bytes().to_vec());
        let key_spec = Value::Array(vec![
            bulk("flags"),
            Value::Array(vec![simple("RO"), simple("access")]),
            bulk("begin_search"),
            Value::Array(vec![
                bulk("type"),
                bulk("index"),
                bulk("spec"),
                Value::Array(vec![bulk("index"), Value::Int(1)]),
            ]),
            bulk("find_keys"),
            Value::Array(vec![
                bulk("type"),
                bulk("range"),
                bulk("spec"),
                Value::Array(vec![
                    bulk("lastkey"),
                    Value::Int(0),
                    bulk("keystep"),
                    Value::Int(1),
                    bulk("limit"),
                    Value::Int(0),
                ]),
            ]),
        ]);
        let get = Value::Array(vec![
            bulk("get"),
            Value::Int(2),
            Value::Array(vec![simple("readonly")]),
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
            Value::Array(vec![simple("@read")]),
            Value::Array(Vec::new()),
            Value::Array(vec![key_spec]),
            Value::Array(Vec::new()),
        ]);
        assert_eq!(connection.send(&["COMMAND", "INFO", "get", "nosuch"]), Value::Array(vec![get, Value::Null]));
        let mset = connection.send(&["COMMAND", "INFO", "MSET"]);
        let mset = &mset.items()[0];
        assert_eq!(mset.items()[3..6], [Value::Int(1), Value::Int(-1), Value::Int(2)]);
        assert_eq!(
            mset.items()[7],
            Value::Array(vec![bulk("request_policy:multi_shard"), bulk("response_policy:all_succeeded")])
        );
        let rename = connection.send(&["COMMAND", "INFO", "rename"]);
        assert_eq!(rename.items()[0].items()[8].items().len(), 2, "one key specification per key");
        let setname = connection.send(&["COMMAND", "INFO", "client|setname"]);
        assert_eq!(setname.items()[0].items()[..2], [bulk("client|setname"), Value::Int(3)]);
        let hello = connection.send(&["COMMAND", "INFO", "hello"]);
        assert_eq!(hello.items()[0].items()[2], Value::Array(vec![simple("no_auth")]));
    }

    /// `COMMAND GETKEYS` and `GETKEYSANDFLAGS` answer with Redis's errors for what they cannot.
    #[test]
    fn getkeys_refuses_as_redis_does() {
        let mut connection = Connection::single_server();
        assert_eq!(connection.send(&["COMMAND", "GETKEYS", "nosuch", "a"]), error("ERR Invalid command specified"));
        assert_eq!(
            connection.send(&["COMMAND", "GETKEYS", "ping", "a"]),
            error("ERR The command has no key arguments")
        );
        assert_eq!(
            connection.send(&["COMMAND", "GETKEYS", "get", "a", "b"]),
            error("ERR Invalid number of arguments specified for command")
        );
        assert_eq!(
            connection.send(&["COMMAND", "GETKEYS", "ferrite.invoke", "", "payload"]),
            error("ERR Invalid arguments specified for command"),
            "a plugin call on the pool names no key"
        );
        assert_eq!(
            connection.send(&["COMMAND", "GETKEYS", "get"]),
            error("ERR wrong number of arguments for 'command|getkeys' command")
        );
        let simple = |text: &str| Value::Simple(text.to_owned());
        assert_eq!(
            connection.send(&["COMMAND", "GETKEYSANDFLAGS", "set", "k", "v"]),
            Value::Array(vec![Value::Array(vec![
                Value::Bulk(b"k".to_vec()),
                Value::Array(vec![simple("RW"), simple("access"), simple("update")])
            ])])
        );
        assert_eq!(
            connection.send(&["COMMAND", "NOSUCH"]),
            error("ERR unknown subcommand 'NOSUCH'. Try COMMAND HELP.")
        );
    }

    /// Tips and subcommands name only what is served.
    #[test]
    fn tips_and_subcommands_name_served_commands() {
        for (name, _) in TIPS {
            assert!(lookup(name.as_bytes()).is_some(), "tips of {name}");
        }
        for (name, subcommands) in super::super::SUBCOMMANDS {
            assert!(lookup(name.as_bytes()).is_some(), "subcommands of {name}");
            for (i, subcommand) in subcommands.iter().enumerate() {
                assert_eq!(subcommand.name, subcommand.name.to_lowercase());
                assert!(
                    subcommands[..i].iter().all(|other| other.name != subcommand.name),
                    "{name} {} twice",
                    subcommand.name
                );
                assert!(
                    subcommand.arity.unsigned_abs() >= 2,
                    "{name} {}: the arity counts both names",
                    subcommand.name
                );
            }
        }
    }
}
