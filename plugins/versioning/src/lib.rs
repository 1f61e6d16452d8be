//! `versioning`: a Ferrite plugin keeping the last N versions of a value inside the key's own
//! value, so that storing a version is one call whose writes (the version's slot and the
//! header's count) commit as one transaction: after a crash a version is there whole or not at
//! all, and the versions before it are untouched.
//!
//! The value (little-endian; offsets and checks in [`layout`]) is a 32-byte header, then `slots`
//! slots of a `u32` length and `slot_bytes` bytes of data each:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | magic, `u64::from_le_bytes(*b"FRVERS01")` |
//! | 8 | 4 | slots, `u32` |
//! | 12 | 4 | slot_bytes, `u32` |
//! | 16 | 8 | written, `u64`: versions ever stored; the newest is version `written`, from 1 |
//! | 24 | 8 | reserved, `u64`: zero |
//! | 32 | slots × (4 + slot_bytes) | version v in slot (v - 1) % slots: length `u32`, data |
//!
//! Invoke with create-on-demand and a size of `32 + N × (4 + slot_bytes)`: the first `put`
//! formats the all-zero value with N slots, N from the configuration `versions=N` (1 to 1024;
//! 4 when the configuration is empty), and slot_bytes = (size - 32) / N - 4, which must be at
//! least 1. A formatted value keeps its N whatever the configuration says later.
//!
//! Payloads are an ASCII command, then after one space its operand:
//!
//! - `put DATA`: stores DATA (every byte after the space, binary, possibly empty; at most
//!   slot_bytes) as the newest version, overwriting the oldest once N are kept, and answers the
//!   new version's number in decimal. It declares and writes only the slot's length and data
//!   and the header's `written` (the whole header when it formats), about DATA + 12 bytes.
//! - `put` with a detached value (`invoke_put_ado` with the detached flag, as MCAS's versioning
//!   example stores a version): the detached value is DATA, and its memory is freed once it is
//!   copied into the slot. Any other payload with a detached value is refused.
//! - `get`: answers the newest version's data, raw.
//! - `get V`: answers version V's data if it is still kept, that is if
//!   `written - slots < V <= written` (one of the last `slots` stored).
//! - `list`: answers one line `VERSION LEN` per kept version, oldest first, joined by `\n`
//!   (an empty answer before the first put).
//!
//! `get` and `list` work on read-only invocations. A malformed payload, a value that is neither
//! all zero nor a consistent versioning value, a value too small to format, DATA longer than a
//! slot, or `put` on a read-only invocation answers a message starting with `versioning:` and
//! fails with `FERRITE_ERR_INVALID`; `get` with no version stored, or of a version no longer (or
//! not yet) kept, fails with `FERRITE_ERR_NOT_FOUND` and says which versions are kept. A failed
//! call changes nothing.

mod config;
pub mod layout;
mod payload;

use ferrite_plugin::{Call, Context, ErrorCode, Plugin, PluginError};

use layout::{Header, Value, HEADER_BYTES, SLOT_LEN_BYTES, WRITTEN_RANGE};
pub use payload::Operation;

/// The plugin. The versions live in each key's value; the only state is the slot count that
/// the configuration gives values formatted from now on.
#[derive(Debug)]
pub struct Versioning {
    slots: u32,
}

fn not_found(message: String) -> PluginError {
    PluginError::new(ErrorCode::NotFound, message)
}

/// Stores `data` as the version after `current`'s newest, formatting a zero value first when
/// there is no `current`, and returns its number.
fn put(call: &mut Call<'_>, current: Option<Header>, slots: u32, data: &[u8]) -> Result<u64, PluginError> {
    let (header, formats) = match current {
        Some(header) => (header, false),
        None => (Header::format(slots, call.value().len())?, true),
    };
    if data.len() > header.slot_bytes as usize {
        return Err(PluginError::invalid(format!(
            "versioning: {} bytes of data do not fit a slot of {} bytes",
            data.len(),
            header.slot_bytes
        )));
    }
    let version = header
        .written
        .checked_add(1)
        .ok_or_else(|| PluginError::invalid("versioning: the version count would overflow 64 bits"))?;
    let next = Header { written: version, ..header };
    let len = u32::try_from(data.len()).expect("no longer than slot_bytes, a u32");
    let cannot_write =
        |error: PluginError| PluginError::invalid(format!("versioning: cannot write the value ({error})"));

    // Only the bytes that change are declared, so the host copies aside and logs DATA + 12
    // bytes rather than the whole value; both ranges commit together or not at all.
    let slot = next.slot_range(version).start;
    let bytes = call.value_range_mut(slot..slot + SLOT_LEN_BYTES + data.len()).map_err(cannot_write)?;
    bytes[..SLOT_LEN_BYTES].copy_from_slice(&len.to_le_bytes());
    bytes[SLOT_LEN_BYTES..].copy_from_slice(data);
    let header_range = if formats { 0..HEADER_BYTES } else { WRITTEN_RANGE };
    let header_bytes = next.encode();
    call.value_range_mut(header_range.clone()).map_err(cannot_write)?.copy_from_slice(&header_bytes[header_range]);

    // Read back what was written: the other half of the check decode makes on every read.
    debug_assert!(
        match Value::decode(call.value()) {
            Ok(Value::Versions(stored)) => stored.header() == next && stored.get(version) == Some(data),
            _ => false,
        },
        "version {version} does not read back"
    );
    Ok(version)
}

/// Carries out one operation and returns the answer.
fn apply(call: &mut Call<'_>, slots: u32, operation: Operation) -> Result<Vec<u8>, PluginError> {
    if call.targets_pool() {
        return Err(PluginError::invalid("versioning: versions live in a key; invoke it on one"));
    }
    let versions = match Value::decode(call.value())? {
        Value::Zero => None,
        Value::Versions(versions) => Some(versions),
    };
    let header = versions.map(|versions| versions.header());
    let describe_kept =
        || header.map_or_else(|| "no version is stored yet".to_owned(), |header| header.describe_kept());
    if call.detached().is_some() && !matches!(operation, Operation::Put(_)) {
        // Refused, so the detached value's memory goes with the failed call.
        return Err(PluginError::invalid("versioning: a detached value comes only with `put`"));
    }
    match operation {
        Operation::Put(data) => {
            if call.is_read_only() {
                // Said here rather than left to the declare callback, whose refusal names no request.
                return Err(PluginError::invalid("versioning: a read-only invocation can only `get` or `list`"));
            }
            let Some(detached) = call.detached() else {
                return Ok(put(call, header, slots, &data)?.to_string().into_bytes());
            };
            // `invoke_put_ado` with the detached flag: the value sent is the version's data,
            // copied into its slot, and its memory is freed with the call.
            if !data.is_empty() {
                return Err(PluginError::invalid(
                    "versioning: give a version's data after `put` or as the detached value, not both",
                ));
            }
            let data = detached.to_vec();
            let offset = call.detached_offset().expect("a call with a detached value has its offset");
            let version = put(call, header, slots, &data)?;
            call.free_at(offset, data.len())?;
            Ok(version.to_string().into_bytes())
        }
        Operation::GetNewest => {
            let newest = header.map_or(0, |header| header.written);
            versions
                .and_then(|versions| versions.get(newest))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| not_found(format!("versioning: {}", describe_kept())))
        }
        Operation::Get(version) => versions
            .and_then(|versions| versions.get(version))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| not_found(format!("versioning: version {version} is not kept; {}", describe_kept()))),
        Operation::List => {
            let Some(versions) = versions else { return Ok(Vec::new()) };
            let lines: Vec<String> = versions
                .header()
                .kept()
                .map(|version| {
                    let len = versions.get(version).map_or(0, <[u8]>::len);
                    format!("{version} {len}")
                })
                .collect();
            Ok(lines.join("\n").into_bytes())
        }
    }
}

impl Plugin for Versioning {
    fn launch(_context: &Context<'_>, config: &[u8]) -> Result<Versioning, PluginError> {
        Ok(Versioning { slots: config::slots(config)? })
    }

    fn do_work(&mut self, call: &mut Call<'_>) -> Result<(), PluginError> {
        if call.is_signal() {
            // A request on the pool (`[ado] signals`): nothing to do about it.
            return Ok(());
        }
        let answer = Operation::parse(call.payload()).and_then(|operation| apply(call, self.slots, operation));
        match answer {
            Ok(bytes) => call.respond(&bytes),
            Err(error) => {
                // The client sees why; the error's code fails the call so nothing changes.
                call.respond(error.message().as_bytes())?;
                Err(error)
            }
        }
    }
}

ferrite_plugin::export_plugin!(Versioning, "versioning");

#[cfg(test)]
mod tests {
    use ferrite_plugin::testing::{InvokeError, InvokeOptions, TestHost};
    use ferrite_plugin::ErrorCode;

    use super::*;

    /// 4 slots (the default) of 8 bytes: 32 + 4 × (4 + 8).
    const VALUE_BYTES: usize = 80;

    fn host(config: &[u8]) -> TestHost {
        TestHost::new(plugin_table(), config).expect("versioning launches")
    }

    /// Invokes with create-on-demand, expects success and one answer, and checks that every
    /// byte the call changed was declared.
    fn answer(host: &mut TestHost, key: &[u8], payload: &[u8]) -> Vec<u8> {
        answer_with(host, key, payload, InvokeOptions::create(VALUE_BYTES))
    }

    fn answer_with(host: &mut TestHost, key: &[u8], payload: &[u8], options: InvokeOptions) -> Vec<u8> {
        let responses = host.invoke(key, payload, options).expect("succeeds");
        assert_eq!(responses.len(), 1);
        assert!(host.undeclared_writes().is_empty(), "{:?}", host.undeclared_writes());
        responses[0].data.clone()
    }

    fn answer_text(host: &mut TestHost, key: &[u8], payload: &str) -> String {
        String::from_utf8(answer(host, key, payload.as_bytes())).expect("text")
    }

    /// Expects the call to fail, and the value to be as it was before it.
    fn failure(host: &mut TestHost, key: &[u8], payload: &[u8], options: InvokeOptions) -> (InvokeError, String) {
        let before = host.get(key);
        let error = host.invoke(key, payload, options).expect_err("fails");
        assert!(host.undeclared_writes().is_empty(), "{:?}", host.undeclared_writes());
        assert_eq!(host.get(key), before, "a failed call changed the value");
        let text = String::from_utf8(error.responses[0].data.clone()).expect("text");
        (error, text)
    }

    fn read_only() -> InvokeOptions {
        InvokeOptions { read_only: true, ..InvokeOptions::default() }
    }

    /// The first put formats the zero value: the header says 4 slots of 8 bytes and one version,
    /// slot 0 holds it, and every other byte is still zero. A value with a remainder under one
    /// slot gets the same slots.
    #[test]
    fn first_put_formats_the_value() {
        let mut host = host(b"");
        assert_eq!(answer_text(&mut host, b"v", "put hello"), "1");
        let bytes = host.get(b"v").expect("created");
        assert_eq!(bytes.len(), VALUE_BYTES);
        assert_eq!(bytes[0..32], Header { slots: 4, slot_bytes: 8, written: 1 }.encode());
        assert_eq!(bytes[32..36], 5u32.to_le_bytes());
        assert_eq!(&bytes[36..41], b"hello");
        assert!(bytes[41..].iter().all(|&byte| byte == 0));

        answer_with(&mut host, b"odd", b"put x", InvokeOptions::create(VALUE_BYTES + 3));
        let bytes = host.get(b"odd").expect("created");
        assert_eq!(bytes[0..32], Header { slots: 4, slot_bytes: 8, written: 1 }.encode());
    }

    /// A zero value too small for one data byte per slot is refused, naming the minimum size
    /// (32 + 4 × 5 = 52), and stays zero.
    #[test]
    fn too_small_to_format() {
        let mut host = host(b"");
        host.put(b"v", &[0; 51]);
        let (error, text) = failure(&mut host, b"v", b"put x", InvokeOptions::default());
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
        assert!(text.contains("at least 52 bytes"), "{text}");
        host.put(b"v", &[0; 52]);
        assert_eq!(answer_with(&mut host, b"v", b"put x", InvokeOptions::default()), b"1");
    }

    /// `put` with a detached value (`invoke_put_ado --detached`) stores the detached bytes as
    /// the next version; data given twice, or a detached value with another request, is refused
    /// and changes nothing.
    #[test]
    fn a_detached_value_is_the_version_put_stores() {
        let mut host = host(b"");
        assert_eq!(answer_text(&mut host, b"v", "put a"), "1");
        let detached = |bytes: &[u8]| InvokeOptions { detached: Some(bytes.to_vec()), ..InvokeOptions::default() };
        assert_eq!(answer_with(&mut host, b"v", b"put", detached(b"far away")), b"2");
        assert_eq!(answer(&mut host, b"v", b"get 2"), b"far away");
        assert_eq!(answer(&mut host, b"v", b"list"), b"1 1\n2 8");
        let (_, text) = failure(&mut host, b"v", b"put twice", detached(b"x"));
        assert!(text.contains("not both"), "{text}");
        let (_, text) = failure(&mut host, b"v", b"list", detached(b"x"));
        assert!(text.contains("only with `put`"), "{text}");
    }

    /// Versions stored one per call read back by number and as the newest, binary and empty
    /// data included; `list` gives each with its length, oldest first.
    #[test]
    fn put_get_list_round_trip() {
        let mut host = host(b"");
        assert_eq!(answer(&mut host, b"v", b"list"), b"", "no versions yet");
        assert_eq!(answer_text(&mut host, b"v", "put a"), "1");
        assert_eq!(answer(&mut host, b"v", b"put \x00\xff b c"), b"2");
        assert_eq!(answer(&mut host, b"v", b"get"), b"\x00\xff b c");
        assert_eq!(answer_text(&mut host, b"v", "put "), "3");
        assert_eq!(answer(&mut host, b"v", b"get"), b"", "the newest is empty");
        assert_eq!(answer(&mut host, b"v", b"get 1"), b"a");
        assert_eq!(answer(&mut host, b"v", b"get 2"), b"\x00\xff b c");
        assert_eq!(answer_text(&mut host, b"v", "put 12345678"), "4", "a full slot");
        assert_eq!(answer_text(&mut host, b"v", "list"), "1 1\n2 6\n3 0\n4 8");
        assert_eq!(answer(&mut host, b"v", b"get"), b"12345678");
    }

    /// Past 4 versions the oldest are overwritten: they are gone from `list` and `get N`, whose
    /// error says which versions are kept, and the kept ones are intact.
    #[test]
    fn wraps_past_the_slots() {
        let mut host = host(b"");
        for (version, data) in ["one", "two", "three", "four", "five", "six"].iter().enumerate() {
            assert_eq!(answer_text(&mut host, b"v", &format!("put {data}")), (version + 1).to_string());
        }
        assert_eq!(answer_text(&mut host, b"v", "list"), "3 5\n4 4\n5 4\n6 3");
        assert_eq!(answer_text(&mut host, b"v", "get 3"), "three");
        assert_eq!(answer_text(&mut host, b"v", "get"), "six");
        for gone in ["get 0", "get 1", "get 2", "get 7"] {
            let (error, text) = failure(&mut host, b"v", gone.as_bytes(), InvokeOptions::default());
            assert_eq!(error.code(), Some(ErrorCode::NotFound), "{gone}");
            assert!(text.contains("versions 3 to 6 are kept"), "{text}");
        }
        let written = &host.get(b"v").expect("stored")[16..24];
        assert_eq!(written, 6u64.to_le_bytes());
    }

    /// `get` on a value with no version is not found, and says so.
    #[test]
    fn get_before_any_put() {
        let mut host = host(b"");
        host.put(b"v", &[0; VALUE_BYTES]);
        for payload in ["get", "get 1"] {
            let (error, text) = failure(&mut host, b"v", payload.as_bytes(), InvokeOptions::default());
            assert_eq!(error.code(), Some(ErrorCode::NotFound));
            assert!(text.contains("no version is stored yet"), "{text}");
        }
    }

    /// A put changes only the slot's length and data and the header's `written`, about
    /// len + 12 bytes, not the whole value.
    #[test]
    fn put_writes_only_the_slot_and_the_count() {
        let mut host = host(b"");
        answer(&mut host, b"v", b"put 12345678");
        answer(&mut host, b"v", b"put 12345678");
        let before = host.get(b"v").expect("stored");
        answer(&mut host, b"v", b"put abc");
        let after = host.get(b"v").expect("stored");
        let changed: Vec<usize> = (0..VALUE_BYTES).filter(|&at| before[at] != after[at]).collect();
        // Version 3 is in slot 2, at 32 + 2 × 12 = 56: length at 56..60, data at 60..63.
        assert!(changed.iter().all(|at| (16..24).contains(at) || (56..63).contains(at)), "{changed:?}");
        assert_eq!(after[56..63], [3, 0, 0, 0, b'a', b'b', b'c']);
    }

    /// DATA longer than a slot is refused and changes nothing, on a formatted value and on a
    /// zero one (which stays unformatted).
    #[test]
    fn too_long_data_changes_nothing() {
        let mut host = host(b"");
        host.put(b"fresh", &[0; VALUE_BYTES]);
        let (error, text) = failure(&mut host, b"fresh", b"put 123456789", InvokeOptions::default());
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
        assert!(text.contains("9 bytes of data do not fit a slot of 8 bytes"), "{text}");
        assert_eq!(host.get(b"fresh"), Some(vec![0; VALUE_BYTES]));

        answer(&mut host, b"v", b"put a");
        failure(&mut host, b"v", b"put 123456789", InvokeOptions::default());
        assert_eq!(answer_text(&mut host, b"v", "list"), "1 1");
    }

    /// A value that is neither zero nor a consistent versioning value is refused by every
    /// request and left as it was.
    #[test]
    fn refuses_corrupt_values() {
        let mut host = host(b"");
        host.put(b"text", b"some other writer's value, long enough to hold a header and slots");
        let mut bad_slots = Header { slots: 4, slot_bytes: 8, written: 1 }.encode().to_vec();
        bad_slots.resize(VALUE_BYTES, 0);
        bad_slots[8..12].copy_from_slice(&5u32.to_le_bytes());
        host.put(b"slots", &bad_slots);
        let mut bad_written = Header { slots: 4, slot_bytes: 8, written: 1 }.encode().to_vec();
        bad_written.resize(VALUE_BYTES, 0);
        bad_written[44..48].copy_from_slice(&1u32.to_le_bytes()); // slot 1 holds bytes, version 2 was never put
        host.put(b"written", &bad_written);
        for key in [&b"text"[..], b"slots", b"written"] {
            for payload in ["put x", "get", "get 1", "list"] {
                let (error, text) = failure(&mut host, key, payload.as_bytes(), InvokeOptions::default());
                assert_eq!(error.code(), Some(ErrorCode::Invalid), "{payload}");
                assert!(text.contains("not a versioning value"), "{text}");
            }
        }
    }

    /// `versions=2` formats values with 2 slots (of (80 - 32) / 2 - 4 = 20 bytes), which wrap
    /// after 2; a value formatted under another configuration keeps its own count. A
    /// configuration that is not `versions=N` refuses to launch.
    #[test]
    fn configured_version_count() {
        let mut host = host(b"versions=2");
        for data in ["a", "b", "c"] {
            answer(&mut host, b"v", format!("put {data}").as_bytes());
        }
        let bytes = host.get(b"v").expect("stored");
        assert_eq!(bytes[0..32], Header { slots: 2, slot_bytes: 20, written: 3 }.encode());
        assert_eq!(answer_text(&mut host, b"v", "list"), "2 1\n3 1");
        assert_eq!(answer_text(&mut host, b"v", "put 20 bytes of data!"), "4");

        let mut default = self::host(b"");
        default.put(b"v", &bytes);
        assert_eq!(answer_text(&mut default, b"v", "put d"), "4");
        assert_eq!(answer_text(&mut default, b"v", "list"), "3 1\n4 1");

        assert!(TestHost::new(plugin_table(), b"versions=0").is_err());
        assert!(TestHost::new(plugin_table(), b"keep=2").is_err());
    }

    /// A read-only invocation may `get` and `list` but not `put`, even on a zero value it
    /// would format.
    #[test]
    fn read_only_reads_but_does_not_put() {
        let mut host = host(b"");
        answer(&mut host, b"v", b"put a");
        assert_eq!(answer_with(&mut host, b"v", b"get", read_only()), b"a");
        assert_eq!(answer_with(&mut host, b"v", b"get 1", read_only()), b"a");
        assert_eq!(answer_with(&mut host, b"v", b"list", read_only()), b"1 1");
        host.put(b"zero", &[0; VALUE_BYTES]);
        for key in [&b"v"[..], b"zero"] {
            let (error, text) = failure(&mut host, key, b"put b", read_only());
            assert_eq!(error.code(), Some(ErrorCode::Invalid));
            assert!(text.contains("read-only"), "{text}");
        }
    }

    /// A layer that fails every call, placed after versioning so the chain fails once
    /// versioning has written.
    #[derive(Debug)]
    struct Fails;

    impl Plugin for Fails {
        fn launch(_context: &Context<'_>, _config: &[u8]) -> Result<Fails, PluginError> {
            Ok(Fails)
        }

        fn do_work(&mut self, _call: &mut Call<'_>) -> Result<(), PluginError> {
            Err(PluginError::failed("fails: fails every call"))
        }
    }

    // Its table alone: `export_plugin!` would export a second `ferrite_plugin_entry`.
    static FAILS: ferrite_plugin::abi::PluginV1 = ferrite_plugin::export::table::<Fails>(c"fails");

    /// When a later layer fails the call, the put's writes (slot and header) are undone: the
    /// value is byte for byte as before, formatted or not; a failed create leaves no key.
    #[test]
    fn failed_call_leaves_the_value_unchanged() {
        let mut host =
            TestHost::builder().plugin(plugin_table(), b"").plugin(&FAILS, b"").build().expect("the chain launches");
        host.put(b"zero", &[0; VALUE_BYTES]);
        let mut formatted = Header { slots: 4, slot_bytes: 8, written: 1 }.encode().to_vec();
        formatted.resize(VALUE_BYTES, 0);
        formatted[32] = 1;
        formatted[36] = b'a';
        host.put(b"formatted", &formatted);
        for (key, version) in [(&b"zero"[..], &b"1"[..]), (b"formatted", b"2")] {
            let (error, _) = failure(&mut host, key, b"put b", InvokeOptions::default());
            assert_eq!(error.code(), Some(ErrorCode::Failed), "the second layer fails the call");
            assert_eq!(error.responses[0].data, version, "versioning stored it before the chain failed");
        }
        let error = host.invoke(b"new", b"put b", InvokeOptions::create(VALUE_BYTES)).expect_err("fails");
        assert_eq!(error.code(), Some(ErrorCode::Failed));
        assert_eq!(host.get(b"new"), None);
    }

    /// A key-less invocation has no value to keep versions in.
    #[test]
    fn refuses_the_pool_as_target() {
        let mut host = host(b"");
        let error = host.invoke_pool(b"list", InvokeOptions::default()).expect_err("no key");
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
    }
}
