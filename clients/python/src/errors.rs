//! The exception hierarchy and the translation of client errors into it.
//!
//! ```text
//! FerriteError                        .code (name), .number (wire code or None), .message
//! ├── KeyNotFound, PoolExists, ...    one per ErrorCode::ALL, named by camel-casing the code
//! │   ├── InvalidArgument             also a ValueError
//! │   │   └── BufferTooSmall          get_into's buffer cannot hold the value; .needed
//! │   └── NotLeader                   in a cluster, the leader stayed out of reach; .group,
//! │                                   .leader, .leader_native, .map_version
//! ├── ConnectionFailed                also a ConnectionError: connecting, reading or writing failed
//! │   └── ConnectionClosed            the shard connection (or the session) is gone
//! └── UnexpectedResponse              the server sent something this client cannot use
//! ```
//!
//! The wire classes are generated from `ErrorCode::ALL` at import, so a code added to the
//! protocol gets its class (and its `ErrorCode` member) with no change here.

use ferrite_client::{Error, ErrorCode};
use pyo3::exceptions::{PyConnectionError, PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// The module the classes say they belong to: users see `ferrite.KeyNotFound`, not `_ferrite`.
const PUBLIC_MODULE: &str = "ferrite";

struct Classes {
    base: Py<PyType>,
    /// By wire code, in `ErrorCode::ALL` order.
    by_code: Vec<(ErrorCode, Py<PyType>)>,
    buffer_too_small: Py<PyType>,
    connection_failed: Py<PyType>,
    connection_closed: Py<PyType>,
    unexpected_response: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

/// `key_not_found` -> `KeyNotFound`.
pub(crate) fn class_name(code_name: &str) -> String {
    code_name
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect::<String>(),
                None => String::new(),
            }
        })
        .collect()
}

/// Makes `class NAME(*bases)` with the given class attributes, as the `type()` builtin would.
fn make_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: &[Bound<'py, PyType>],
    doc: &str,
    attributes: &[(&str, Bound<'py, PyAny>)],
) -> PyResult<Bound<'py, PyType>> {
    let namespace = PyDict::new(py);
    namespace.set_item("__module__", PUBLIC_MODULE)?;
    namespace.set_item("__doc__", doc)?;
    for (key, value) in attributes {
        namespace.set_item(*key, value)?;
    }
    let bases = PyTuple::new(py, bases)?;
    let class = py.get_type::<PyType>().call1((name, bases, namespace))?;
    Ok(class.cast_into::<PyType>()?)
}

fn build(py: Python<'_>) -> PyResult<Classes> {
    let none = py.None().into_bound(py);
    let base = make_class(
        py,
        "FerriteError",
        &[py.get_type::<PyException>()],
        "Base class of every Ferrite error.\n\n\
         Attributes:\n    code: the error's name: a wire error code such as \"key_not_found\", or a \
         client-side one (\"connection_failed\", \"connection_closed\", \"unexpected_response\").\n    \
         number: the wire error code's number, or None for client-side errors.\n    \
         message: the server's (or the client's) explanation, without the code.",
        &[("code", none.clone()), ("number", none.clone()), ("message", none.clone())],
    )?;
    let mut by_code = Vec::with_capacity(ErrorCode::ALL.len());
    for code in ErrorCode::ALL {
        let mut bases = vec![base.clone()];
        if code == ErrorCode::InvalidArgument {
            bases.push(py.get_type::<PyValueError>());
        }
        let description = code.description();
        let doc = format!("Wire error code {} ({}): {description}.", code.as_u16(), code.name());
        let class = make_class(
            py,
            &class_name(code.name()),
            &bases,
            &doc,
            &[
                ("code", code.name().into_pyobject(py)?.into_any()),
                ("number", code.as_u16().into_pyobject(py)?.into_any()),
            ],
        )?;
        by_code.push((code, class.unbind()));
    }
    let invalid_argument = by_code
        .iter()
        .find(|(code, _)| *code == ErrorCode::InvalidArgument)
        .map(|(_, class)| class.bind(py).clone())
        .expect("ErrorCode::ALL holds invalid_argument");
    let buffer_too_small = make_class(
        py,
        "BufferTooSmall",
        &[invalid_argument],
        "The buffer given to get_into() is smaller than the value; `needed` is the value's length.",
        &[("needed", none.clone())],
    )?;
    let connection_failed = make_class(
        py,
        "ConnectionFailed",
        &[base.clone(), py.get_type::<PyConnectionError>()],
        "Connecting to a shard, or reading or writing its connection, failed (client-side).",
        &[("code", "connection_failed".into_pyobject(py)?.into_any())],
    )?;
    let connection_closed = make_class(
        py,
        "ConnectionClosed",
        std::slice::from_ref(&connection_failed),
        "The shard connection, or the session, is closed. Pools opened on a connection that died \
         must be reopened (the session reconnects by itself).",
        &[("code", "connection_closed".into_pyobject(py)?.into_any())],
    )?;
    let unexpected_response = make_class(
        py,
        "UnexpectedResponse",
        std::slice::from_ref(&base),
        "The server sent something this client cannot make sense of: a bug or a version mismatch.",
        &[("code", "unexpected_response".into_pyobject(py)?.into_any())],
    )?;
    Ok(Classes {
        base: base.unbind(),
        by_code,
        buffer_too_small: buffer_too_small.unbind(),
        connection_failed: connection_failed.unbind(),
        connection_closed: connection_closed.unbind(),
        unexpected_response: unexpected_response.unbind(),
    })
}

fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get_or_try_init(py, || build(py))
}

/// Adds every class to the module, and `ERROR_CODES` (name to number, in numeric order).
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let classes = classes(py)?;
    module.add("FerriteError", classes.base.bind(py))?;
    let codes = PyDict::new(py);
    for (code, class) in &classes.by_code {
        module.add(class_name(code.name()), class.bind(py))?;
        codes.set_item(code.name(), code.as_u16())?;
    }
    module.add("ERROR_CODES", codes)?;
    for class in [
        &classes.buffer_too_small,
        &classes.connection_failed,
        &classes.connection_closed,
        &classes.unexpected_response,
    ] {
        let class = class.bind(py);
        module.add(class.name()?, class)?;
    }
    Ok(())
}

/// An instance of `class` whose `str()` is `text` and whose `.message` is `message`.
fn instantiate(class: &Bound<'_, PyType>, text: String, message: String) -> PyErr {
    match class.call1((text,)) {
        Ok(instance) => match instance.setattr("message", message) {
            Ok(()) => PyErr::from_value(instance),
            Err(error) => error,
        },
        Err(error) => error,
    }
}

fn code_class<'py>(py: Python<'py>, classes: &Classes, code: ErrorCode) -> Bound<'py, PyType> {
    // A code newer than ErrorCode::ALL cannot happen (the enum is this build's), but the enum is
    // non-exhaustive, so fall back to the base class rather than panic.
    classes.by_code.iter().find(|(c, _)| *c == code).map_or(&classes.base, |(_, class)| class).bind(py).clone()
}

/// The Python exception for a client error.
pub(crate) fn to_py(py: Python<'_>, error: Error) -> PyErr {
    let classes = match classes(py) {
        Ok(classes) => classes,
        Err(error) => return error,
    };
    let text = error.to_string();
    let (class, message) = match &error {
        Error::Server { code, message } => {
            let message = if message.is_empty() { code.description().to_owned() } else { message.clone() };
            (code_class(py, classes, *code), message)
        }
        Error::Protocol(protocol) => (code_class(py, classes, protocol.code()), protocol.to_string()),
        Error::InvalidArgument(message) => (code_class(py, classes, ErrorCode::InvalidArgument), message.clone()),
        Error::Io { .. } | Error::Unreachable { .. } | Error::Tls { .. } | Error::TlsRequired { .. } => {
            (classes.connection_failed.bind(py).clone(), text.clone())
        }
        Error::ConnectionClosed(message) => (classes.connection_closed.bind(py).clone(), message.clone()),
        Error::UnexpectedResponse(message) => (classes.unexpected_response.bind(py).clone(), message.clone()),
        Error::NotLeader(refusal) => {
            let error = instantiate(&code_class(py, classes, ErrorCode::NotLeader), text, refusal.message.clone());
            return with_refusal(py, error, refusal);
        }
        _ => (classes.base.bind(py).clone(), text.clone()),
    };
    instantiate(&class, text, message)
}

/// A `NotLeader` exception carrying what the refusal said of the group's leader.
fn with_refusal(py: Python<'_>, error: PyErr, refusal: &ferrite_client::NotLeader) -> PyErr {
    let value = error.value(py);
    let set = value
        .setattr("group", refusal.group)
        .and_then(|()| value.setattr("leader", refusal.leader))
        .and_then(|()| value.setattr("leader_native", &refusal.leader_native))
        .and_then(|()| value.setattr("map_version", refusal.map_version));
    match set {
        Ok(()) => error,
        Err(setting) => setting,
    }
}

/// [`to_py`] for `map_err`, attaching to the interpreter (free when already attached).
pub(crate) fn failed(error: Error) -> PyErr {
    Python::attach(|py| to_py(py, error))
}

/// `InvalidArgument` raised by this binding before anything is sent.
pub(crate) fn invalid_argument(message: impl Into<String>) -> PyErr {
    failed(Error::InvalidArgument(message.into()))
}

/// A call on a pool that was closed (by `Pool.close()` or its session's `close()`).
pub(crate) fn pool_closed(name: &str) -> PyErr {
    failed(Error::Server { code: ErrorCode::PoolNotOpen, message: format!("pool {name:?} is closed") })
}

/// A call on a session that was closed.
pub(crate) fn session_closed() -> PyErr {
    failed(Error::ConnectionClosed("the session is closed".to_owned()))
}

/// `get_into`'s buffer of `have` bytes cannot hold a value of `needed` bytes.
pub(crate) fn buffer_too_small(needed: u64, have: usize) -> PyErr {
    Python::attach(|py| {
        let classes = match classes(py) {
            Ok(classes) => classes,
            Err(error) => return error,
        };
        let message = format!(
            "the value is {needed} bytes but the buffer holds only {have}; pass one of at least {needed} bytes"
        );
        let error = instantiate(classes.buffer_too_small.bind(py), format!("invalid argument: {message}"), message);
        if let Err(setting) = error.value(py).setattr("needed", needed) {
            return setting;
        }
        error
    })
}
