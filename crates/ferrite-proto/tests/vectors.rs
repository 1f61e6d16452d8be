//! Conformance of this crate to the language-neutral test vectors in `testdata/protocol/`.
//!
//! Proves that, for every vector in `vectors.json`, encoding the JSON message produces exactly the
//! vector's frame and decoding the frame gives back the same message, which maps back to exactly
//! the vector's JSON (as the clients' bindings read it); that every error vector is rejected with
//! its named error code; and that `shard_for_pool` agrees with every case in `routing.json`. The
//! vectors are generated from `docs/protocol.md` by an independent encoder
//! (`testdata/protocol/generate.py`), so a failure here means the crate and the specification
//! disagree. Each test checks every vector and names all the failing ones.

use std::path::PathBuf;

use bytes::BytesMut;
use ferrite_proto::vectors::{hex, request, request_json, response, response_json, unhex, Fields};
use ferrite_proto::{shard_for_pool, Header, Request, Response, HEADER_BYTES};
use serde_json::Value;

fn load(file: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/protocol").join(file);
    let text = std::fs::read_to_string(&path).expect("the test vectors are committed under testdata/protocol");
    let json: Value = serde_json::from_str(&text).expect("the test vector files are valid JSON");
    let Value::Array(items) = json else {
        panic!("{} does not hold a JSON array", path.display());
    };
    items
}

/// Runs `check` on every item and fails once, naming every item that failed.
fn check_all(what: &str, items: &[Value], check: impl Fn(&Value) -> Result<(), String>) {
    let failures: Vec<String> =
        items.iter().filter_map(|item| check(item).err().map(|why| format!("  {}: {why}", item_name(item)))).collect();
    assert!(!items.is_empty(), "no {what} found");
    assert!(failures.is_empty(), "{} of {} {what} failed:\n{}", failures.len(), items.len(), failures.join("\n"));
}

fn item_name(item: &Value) -> String {
    match item.get("name").and_then(Value::as_str) {
        Some(name) => name.to_owned(),
        None => item.to_string(),
    }
}

/// The valid vectors of `direction` (`Some("request")`, `Some("response")`), or with `None` every
/// error vector.
fn vectors_where(direction: Option<&str>) -> Vec<Value> {
    load("vectors.json")
        .into_iter()
        .filter(|v| match direction {
            Some(direction) => v.get("error").is_none() && v["direction"] == direction,
            None => v.get("error").is_some(),
        })
        .collect()
}

fn as_u64(value: &Value, field: &str) -> Result<u64, String> {
    value.as_u64().ok_or_else(|| format!("{field:?} is not an unsigned 64-bit integer"))
}

/// The vector's frame, split into its parsed header and its body, after checking that the header
/// agrees with the vector about the body length and the request id.
fn frame_parts(vector: &Value) -> Result<(Vec<u8>, Header), String> {
    let frame = unhex(vector["frame"].as_str().ok_or("\"frame\" is not a string")?)?;
    let header = Header::parse(&frame).ok_or("frame is shorter than a header")?;
    if header.frame_len() != frame.len() {
        return Err(format!(
            "header body_len {} but the frame carries {} body bytes",
            header.body_len,
            frame.len() - HEADER_BYTES
        ));
    }
    let request_id = as_u64(&vector["request_id"], "request_id")?;
    if header.request_id != request_id {
        return Err(format!("header request id {} but the vector says {request_id}", header.request_id));
    }
    Ok((frame, header))
}

fn compare_frames(encoded: &[u8], expected: &[u8]) -> Result<(), String> {
    if encoded == expected {
        return Ok(());
    }
    let at = encoded.iter().zip(expected).take_while(|(a, b)| a == b).count();
    Err(format!("encode differs from byte {at} on:\n    encoded  {}\n    expected {}", hex(encoded), hex(expected)))
}

fn check_request_vector(vector: &Value) -> Result<(), String> {
    let (frame, header) = frame_parts(vector)?;
    let fields = Fields::new(&vector["message"])?;
    let expected = request(&fields)?;
    let mut encoded = BytesMut::new();
    expected.encode(header.request_id, &mut encoded);
    compare_frames(&encoded, &frame)?;
    let decoded = Request::decode(&header, &frame[HEADER_BYTES..]).map_err(|e| format!("decode failed: {e}"))?;
    if decoded != expected {
        return Err(format!("decode gave {decoded:?}, expected {expected:?}"));
    }
    compare_json(&request_json(&decoded), &vector["message"])
}

/// Checks that a decoded message maps back to exactly the vector's JSON message, as the clients'
/// bindings read it.
fn compare_json(mapped: &Value, message: &Value) -> Result<(), String> {
    if mapped != message {
        return Err(format!("the decoded message maps to {mapped}, expected {message}"));
    }
    Ok(())
}

fn check_response_vector(vector: &Value) -> Result<(), String> {
    let (frame, header) = frame_parts(vector)?;
    let fields = Fields::new(&vector["message"])?;
    let (expected, answers) = response(&fields)?;
    let mut encoded = BytesMut::new();
    expected.encode_answer(answers.unwrap_or(expected.request_opcode()), header.request_id, &mut encoded);
    compare_frames(&encoded, &frame)?;
    let decoded = Response::decode(&header, &frame[HEADER_BYTES..]).map_err(|e| format!("decode failed: {e}"))?;
    if decoded != expected {
        return Err(format!("decode gave {decoded:?}, expected {expected:?}"));
    }
    compare_json(&response_json(&decoded, &header), &vector["message"])
}

fn check_error_vector(vector: &Value) -> Result<(), String> {
    let (frame, header) = frame_parts(vector)?;
    let body = &frame[HEADER_BYTES..];
    let expected = vector["error"].as_str().ok_or("\"error\" is not a string")?;
    let outcome = match vector["direction"].as_str() {
        Some("request") => Request::decode(&header, body).map(|r| format!("{r:?}")),
        Some("response") => Response::decode(&header, body).map(|r| format!("{r:?}")),
        _ => return Err("\"direction\" is neither \"request\" nor \"response\"".to_owned()),
    };
    match outcome {
        Err(e) if e.code().name() == expected => Ok(()),
        Err(e) => Err(format!("decode failed with {} ({e}), expected {expected}", e.code().name())),
        Ok(message) => Err(format!("decode succeeded with {message}, expected {expected}")),
    }
}

fn check_routing_case(case: &Value) -> Result<(), String> {
    let pool = case["pool"].as_str().ok_or("\"pool\" is not a string")?;
    let shard_count = u16::try_from(as_u64(&case["shard_count"], "shard_count")?).map_err(|e| e.to_string())?;
    let expected = as_u64(&case["shard"], "shard")?;
    let shard = shard_for_pool(pool, shard_count);
    if u64::from(shard) != expected {
        return Err(format!("shard_for_pool gave {shard}, expected {expected}"));
    }
    Ok(())
}

#[test]
fn request_vectors_encode_and_decode() {
    check_all("request vectors", &vectors_where(Some("request")), check_request_vector);
}

#[test]
fn response_vectors_encode_and_decode() {
    check_all("response vectors", &vectors_where(Some("response")), check_response_vector);
}

#[test]
fn error_vectors_fail_to_decode_with_their_code() {
    check_all("error vectors", &vectors_where(None), check_error_vector);
}

#[test]
fn routing_cases_match_shard_for_pool() {
    check_all("routing cases", &load("routing.json"), check_routing_case);
}

#[test]
fn the_password_hello_vector_carries_its_credentials() {
    let vectors = vectors_where(Some("request"));
    let vector = vectors.iter().find(|v| item_name(v) == "hello_with_password").expect("the vector exists");
    let auth = vector["message"]["auth"].as_str().expect("auth is hex");
    let auth = unhex(auth).expect("valid hex");
    let credentials = ferrite_proto::Credentials::decode(&auth).expect("decodes").expect("carries credentials");
    assert_eq!((credentials.user, credentials.password), ("alice", &b"s3cret\x00pw"[..]));
    assert_eq!(ferrite_proto::Credentials { user: "alice", password: b"s3cret\x00pw" }.encode(), auth);
}
