//! The protocol test vectors' encoder and decoder, exposed so the Python tests check
//! `testdata/protocol/vectors.json` through this extension: a change to the wire format breaks the
//! Python client's tests at the same moment as the Rust client's.
//!
//! Messages travel as JSON text in the vectors' own shape (`docs/protocol.md`, "Test vectors"):
//! byte strings in hex, flags and codes by name. Encoding, decoding and the mapping between that
//! JSON and the messages are `ferrite_proto`'s (its `vectors` module); this module only exposes
//! them to Python.

use bytes::BytesMut;
use ferrite_client::Error;
use ferrite_proto::vectors::{request, request_json, response, response_json, Fields};
use ferrite_proto::{shard_for_pool, Header, ProtocolError, Request, Response, HEADER_BYTES};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::Value;

use crate::errors::failed;

fn bad_vector(why: String) -> PyErr {
    PyValueError::new_err(why)
}

/// Encodes the JSON `message` (a vector's `message`) as one frame with `request_id`.
/// `direction` is "request" or "response".
#[pyfunction]
fn _encode_message<'py>(
    py: Python<'py>,
    direction: &str,
    message: &str,
    request_id: u64,
) -> PyResult<Bound<'py, PyBytes>> {
    let message: Value = serde_json::from_str(message).map_err(|e| bad_vector(format!("message is not JSON: {e}")))?;
    let fields = Fields::new(&message).map_err(bad_vector)?;
    let mut frame = BytesMut::new();
    match direction {
        "request" => request(&fields).map_err(bad_vector)?.encode(request_id, &mut frame),
        "response" => {
            let (response, answers) = response(&fields).map_err(bad_vector)?;
            match answers {
                Some(answers) => response.encode_answer(answers, request_id, &mut frame),
                None => response.encode(request_id, &mut frame),
            }
        }
        other => return Err(bad_vector(format!("direction {other:?} is neither \"request\" nor \"response\""))),
    }
    Ok(PyBytes::new(py, &frame))
}

/// Decodes one whole frame into JSON text in the vectors' `message` shape. A frame that does not
/// decode raises the `FerriteError` subclass of the code a peer would answer with.
#[pyfunction]
fn _decode_frame(direction: &str, frame: &[u8]) -> PyResult<String> {
    let header = Header::parse(frame)
        .ok_or_else(|| failed(Error::Protocol(ProtocolError::Truncated { need: HEADER_BYTES, have: frame.len() })))?;
    if header.frame_len() != frame.len() {
        return Err(bad_vector(format!(
            "the header announces a {}-byte body but the frame carries {}",
            header.body_len,
            frame.len() - HEADER_BYTES
        )));
    }
    let body = &frame[HEADER_BYTES..];
    let message = match direction {
        "request" => request_json(&Request::decode(&header, body).map_err(|e| failed(Error::Protocol(e)))?),
        "response" => response_json(&Response::decode(&header, body).map_err(|e| failed(Error::Protocol(e)))?, &header),
        other => return Err(bad_vector(format!("direction {other:?} is neither \"request\" nor \"response\""))),
    };
    Ok(message.to_string())
}

/// The shard that owns the pool `name` on a server of `shard_count` shards.
#[pyfunction]
fn _shard_for_pool(name: &str, shard_count: u16) -> PyResult<u16> {
    if shard_count == 0 {
        return Err(PyValueError::new_err("a server has at least one shard"));
    }
    Ok(shard_for_pool(name, shard_count))
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(_encode_message, module)?)?;
    module.add_function(wrap_pyfunction!(_decode_frame, module)?)?;
    module.add_function(wrap_pyfunction!(_shard_for_pool, module)?)?;
    Ok(())
}
