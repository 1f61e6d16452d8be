//! Sessions: connecting, and the calls that name pools (create, open, delete, list).

use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;
use std::{mem, ptr};

use ferrite_client::{ClientOptions, Durability, PoolOptions, PoolSetting, Session, TlsOptions, UserCredentials};

use crate::args;
use crate::memory::{ferrite_pool_info_list, ferrite_statistic_list};
use crate::pool::ferrite_pool;
use crate::runtime::Runtime;
use crate::status::{ferrite_status, guard, Failure};

/// A session with one Ferrite server (every shard of it). Made by `ferrite_connect`, freed by
/// `ferrite_session_close`. May be used from several threads at once: their calls share the
/// connections and are pipelined.
#[derive(Debug)]
pub struct ferrite_session {
    // Declared before `runtime` so the connections close while the runtime still runs.
    pub(crate) session: Session,
    pub(crate) runtime: Arc<Runtime>,
}

/// How to connect (`ferrite_connect`). Initialise it with `FERRITE_OPTIONS_INIT`
/// (`ferrite_options options = FERRITE_OPTIONS_INIT;`), which sets `struct_size` and leaves every
/// other field NULL or 0, meaning the default, then set what you need. The strings are copied;
/// they need only live until `ferrite_connect` returns.
///
/// The struct may grow in later releases, fields only ever appended: `struct_size` tells the
/// library how much of it the program's header declared, so a program built against an older
/// header keeps working (the fields it lacks take their defaults).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ferrite_options {
    /// `sizeof(ferrite_options)` as the program's header declares it (`FERRITE_OPTIONS_INIT`
    /// sets it). The library reads no byte past it. A size no `ferrite.h` declares (0, as
    /// `{0}` leaves it; one larger than this library's struct, from a newer header; one inside
    /// a field) fails with `FERRITE_ERR_INVALID_ARGUMENT`.
    pub struct_size: u32,
    /// 0; kept for a later use.
    pub reserved: u32,
    /// Sent in the handshake and shown in the server's logs: name your program. NULL:
    /// "libferrite/VERSION".
    pub client_name: *const c_char,
    /// Limit on connecting plus the handshake, per shard connection, in milliseconds. 0: 10000.
    pub connect_timeout_ms: u64,
    /// PEM file with the CA certificate(s) the server's certificate must chain to. Setting it
    /// turns TLS on (required by servers configured with TLS). NULL: plain TCP.
    pub tls_ca_file: *const c_char,
    /// PEM file with this client's certificate chain, for servers that require client
    /// certificates (mutual TLS). Needs `tls_ca_file` and `tls_client_key_file`.
    pub tls_client_cert_file: *const c_char,
    /// PEM file with the private key of `tls_client_cert_file`.
    pub tls_client_key_file: *const c_char,
    /// The user to authenticate as, on a server with users. NULL: none.
    pub user: *const c_char,
    /// The user's password. Required with `user`.
    pub password: *const c_char,
}

impl ferrite_options {
    /// Every field at its default, and no size: what the caller's bytes are copied over.
    const DEFAULTS: ferrite_options = ferrite_options {
        struct_size: 0,
        reserved: 0,
        client_name: ptr::null(),
        connect_timeout_ms: 0,
        tls_ca_file: ptr::null(),
        tls_client_cert_file: ptr::null(),
        tls_client_key_file: ptr::null(),
        user: ptr::null(),
        password: ptr::null(),
    };

    /// The sizes a caller's struct may declare: where each field after the header ends, so a
    /// struct ending at any field (the layout of an older header) is read up to there.
    const SIZES: [usize; 7] = [
        mem::offset_of!(ferrite_options, client_name) + mem::size_of::<*const c_char>(),
        mem::offset_of!(ferrite_options, connect_timeout_ms) + mem::size_of::<u64>(),
        mem::offset_of!(ferrite_options, tls_ca_file) + mem::size_of::<*const c_char>(),
        mem::offset_of!(ferrite_options, tls_client_cert_file) + mem::size_of::<*const c_char>(),
        mem::offset_of!(ferrite_options, tls_client_key_file) + mem::size_of::<*const c_char>(),
        mem::offset_of!(ferrite_options, user) + mem::size_of::<*const c_char>(),
        mem::offset_of!(ferrite_options, password) + mem::size_of::<*const c_char>(),
    ];

    /// The caller's options, read up to the size they declare, the fields past it at their
    /// defaults; `None` for NULL.
    ///
    /// # Safety
    /// `options` is NULL or points to at least `struct_size` readable bytes (and at least the
    /// `struct_size` field itself), laid out as a prefix of this struct.
    unsafe fn read(options: *const ferrite_options) -> Result<Option<ferrite_options>, Failure> {
        if options.is_null() {
            return Ok(None);
        }
        // SAFETY: `struct_size` comes first in every layout, so the caller's struct holds it.
        let declared = unsafe { ptr::addr_of!((*options).struct_size).read_unaligned() } as usize;
        let own = mem::size_of::<ferrite_options>();
        if declared == 0 {
            return Err(Failure::invalid(
                "options->struct_size is 0: initialise the options with FERRITE_OPTIONS_INIT, which sets it to \
                 sizeof(ferrite_options)",
            ));
        }
        if declared > own {
            return Err(Failure::invalid(format!(
                "options->struct_size is {declared}, larger than this libferrite's ferrite_options ({own} bytes): the \
                 program was built against a newer ferrite.h than libferrite {}; run it with a libferrite at least as \
                 new",
                env!("CARGO_PKG_VERSION")
            )));
        }
        if declared != own && !ferrite_options::SIZES.contains(&declared) {
            return Err(Failure::invalid(format!(
                "options->struct_size is {declared}, which ends inside a field of ferrite_options (a header's struct \
                 ends at one of {:?} bytes): set it with FERRITE_OPTIONS_INIT",
                ferrite_options::SIZES
            )));
        }
        let mut read = ferrite_options::DEFAULTS;
        // SAFETY: the caller promises `declared` readable bytes, at most our own size as checked,
        // laid out as ours; every byte pattern is a valid integer or pointer.
        unsafe { ptr::copy_nonoverlapping(options.cast::<u8>(), ptr::addr_of_mut!(read).cast::<u8>(), declared) };
        if read.reserved != 0 {
            return Err(Failure::invalid(format!("options->reserved is {}, not 0", read.reserved)));
        }
        Ok(Some(read))
    }
}

/// Limit on connecting when `ferrite_options.connect_timeout_ms` is 0, in milliseconds.
pub const FERRITE_CONNECT_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// Flags of `ferrite_pool_create`, or-ed together.
pub type ferrite_pool_flags = u32;
/// Fail with `FERRITE_POOL_EXISTS` instead of opening a pool that already exists.
pub const FERRITE_POOL_CREATE_ONLY: ferrite_pool_flags = 1;
/// Keep an ordered index of the keys, so `ferrite_find` searches in key order.
pub const FERRITE_POOL_INDEXED: ferrite_pool_flags = 2;
/// Writes that choose no durability are acknowledged once applied in memory (without this flag:
/// once on stable storage). Fixed at creation.
pub const FERRITE_POOL_ASYNC: ferrite_pool_flags = 4;
const POOL_FLAGS_KNOWN: ferrite_pool_flags = FERRITE_POOL_CREATE_ONLY | FERRITE_POOL_INDEXED | FERRITE_POOL_ASYNC;

/// A pool size to pass to `ferrite_pool_create` when you have no better figure: 64 MiB.
pub const FERRITE_POOL_SIZE_DEFAULT: u64 = 64 * 1024 * 1024;
const _: () = assert!(FERRITE_POOL_SIZE_DEFAULT == PoolOptions::DEFAULT_SIZE_BYTES);

/// The Rust client's options for C's (read by [`ferrite_options::read`]), which the caller
/// promises are valid.
///
/// # Safety
/// Every non-NULL string in `options` is NUL-terminated and valid for the call.
unsafe fn client_options(options: Option<&ferrite_options>) -> Result<ClientOptions, Failure> {
    let mut client = ClientOptions {
        client_name: concat!("libferrite/", env!("CARGO_PKG_VERSION")).to_owned(),
        ..ClientOptions::default()
    };
    let Some(options) = options else {
        return Ok(client);
    };
    // SAFETY: the strings are passed on from our caller.
    let (name, ca, cert, key, user, password) = unsafe {
        (
            args::optional_text(options.client_name, "options->client_name")?,
            args::optional_path(options.tls_ca_file, "options->tls_ca_file")?,
            args::optional_path(options.tls_client_cert_file, "options->tls_client_cert_file")?,
            args::optional_path(options.tls_client_key_file, "options->tls_client_key_file")?,
            args::optional_text(options.user, "options->user")?,
            args::optional_text(options.password, "options->password")?,
        )
    };
    if let Some(name) = name {
        client.client_name = name.to_owned();
    }
    if options.connect_timeout_ms != 0 {
        client.connect_timeout = Duration::from_millis(options.connect_timeout_ms);
    }
    let client_cert = match (cert, key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((cert, key)),
        _ => {
            return Err(Failure::invalid(
                "options: tls_client_cert_file and tls_client_key_file must be given together",
            ))
        }
    };
    client.tls = match (ca, client_cert) {
        (Some(ca_file), client_cert) => Some(TlsOptions { ca_file, client_cert }),
        (None, None) => None,
        (None, Some(_)) => return Err(Failure::invalid("options: a client certificate needs tls_ca_file (TLS)")),
    };
    client.credentials = match (user, password) {
        (Some(user), Some(password)) => Some(UserCredentials::new(user, password)),
        (None, None) => None,
        (Some(_), None) => return Err(Failure::invalid("options: user is set but password is NULL")),
        (None, Some(_)) => return Err(Failure::invalid("options: password is set but user is NULL")),
    };
    Ok(client)
}

/// Connects to the server shard at `address` ("host:port"; any shard will do) and learns the
/// server's shards and limits. On success `*out` is a new session, to be freed with
/// `ferrite_session_close`; on failure `*out` is NULL.
///
/// `options` may be NULL for the defaults; otherwise its `struct_size` must be one a
/// `ferrite.h` declares (see `ferrite_options`). Fails with `FERRITE_ERR_IO` when the server cannot be
/// reached (or TLS cannot be set up), `FERRITE_AUTHENTICATION_FAILED` for wrong credentials.
///
/// # Safety
/// `address` is NULL or a NUL-terminated string; `options` is NULL or points to a
/// `ferrite_options` of at least `struct_size` bytes whose non-NULL strings are NUL-terminated;
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_connect(
    address: *const c_char,
    options: *const ferrite_options,
    out: *mut *mut ferrite_session,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ptr::null_mut()) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a string and options as documented.
        let address = unsafe { args::text(address, "address")? };
        let options = unsafe { ferrite_options::read(options)? };
        // SAFETY: the caller promises NUL-terminated strings in the options.
        let options = unsafe { client_options(options.as_ref())? };
        let runtime = Runtime::new()?;
        let session = runtime.block_on(Session::connect_with(address, options))?;
        let session = Box::new(ferrite_session { session, runtime });
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(Box::into_raw(session)) };
        Ok(())
    })
}

/// Ends a session and frees it. Pools opened through it stay usable until they are closed
/// themselves (they hold their own connection), and so do asynchronous operations; the
/// session's background thread stops when the last of them is freed. NULL is a no-op.
///
/// # Safety
/// `session` is NULL or a session from `ferrite_connect` not closed before; no other thread may
/// use it during or after this call.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_close(session: *mut ferrite_session) -> ferrite_status {
    guard(|| {
        if !session.is_null() {
            // SAFETY: the caller hands back a session we allocated, once.
            drop(unsafe { Box::from_raw(session) });
        }
        Ok(())
    })
}

/// Creates the pool `name`, or opens it if it exists and `FERRITE_POOL_CREATE_ONLY` is not in
/// `flags`. On success `*out` is the open pool, to be closed with `ferrite_pool_close`; on
/// failure it is NULL. `ferrite_pool_created` tells whether this call created the pool.
///
/// - `size_bytes`: capacity, key bytes + value bytes + 64 bytes per pair; fixed at creation
///   (`FERRITE_POOL_SIZE_DEFAULT` is 64 MiB). 0 fails with `FERRITE_INVALID_ARGUMENT`.
/// - `expected_objects`: sizing hint for the pool's hash table.
/// - `flags`: `FERRITE_POOL_CREATE_ONLY`, `FERRITE_POOL_INDEXED`, `FERRITE_POOL_ASYNC`.
/// - `plugins`: the pool's chain of Active Data Object plugins, comma-separated in the order they
///   run (e.g. "counter"), by the names the server knows them by; NULL or "" for none.
///
/// # Safety
/// `session` is NULL or a live session; `name` and `plugins` are NULL or NUL-terminated; `out` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_pool_create(
    session: *const ferrite_session,
    name: *const c_char,
    size_bytes: u64,
    expected_objects: u64,
    flags: ferrite_pool_flags,
    plugins: *const c_char,
    out: *mut *mut ferrite_pool,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ptr::null_mut()) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live session and strings as documented.
        let (session, name, plugins) = unsafe {
            (
                args::object(session, "session")?,
                args::text(name, "name")?,
                args::optional_text(plugins, "plugins")?.unwrap_or_default(),
            )
        };
        let flags = args::flags(flags, POOL_FLAGS_KNOWN, "pool flags")?;
        let options = PoolOptions {
            size_bytes,
            expected_objects,
            create_only: flags & FERRITE_POOL_CREATE_ONLY != 0,
            indexed: flags & FERRITE_POOL_INDEXED != 0,
            durability: if flags & FERRITE_POOL_ASYNC != 0 { Durability::Async } else { Durability::Sync },
            plugins: plugins.split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned).collect(),
        };
        let pool = session.runtime.block_on(session.session.create_pool(name, options))?;
        let pool = ferrite_pool::new(pool, Arc::clone(&session.runtime), session.session.limits().value_bytes_max);
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(Box::into_raw(Box::new(pool))) };
        Ok(())
    })
}

/// Opens the existing pool `name`. On success `*out` is the open pool, to be closed with
/// `ferrite_pool_close`; on failure it is NULL. Fails with `FERRITE_POOL_NOT_FOUND`.
///
/// # Safety
/// `session` is NULL or a live session; `name` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_pool_open(
    session: *const ferrite_session,
    name: *const c_char,
    out: *mut *mut ferrite_pool,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ptr::null_mut()) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live session and a string.
        let (session, name) = unsafe { (args::object(session, "session")?, args::text(name, "name")?) };
        let pool = session.runtime.block_on(session.session.open_pool(name))?;
        let pool = ferrite_pool::new(pool, Arc::clone(&session.runtime), session.session.limits().value_bytes_max);
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(Box::into_raw(Box::new(pool))) };
        Ok(())
    })
}

/// Deletes the pool `name` and all its pairs. Fails with `FERRITE_POOL_IN_USE` while any session
/// (this one included) has it open, and `FERRITE_POOL_NOT_FOUND` if there is none.
///
/// # Safety
/// `session` is NULL or a live session; `name` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn ferrite_pool_delete(session: *const ferrite_session, name: *const c_char) -> ferrite_status {
    guard(|| {
        // SAFETY: the caller promises a live session and a string.
        let (session, name) = unsafe { (args::object(session, "session")?, args::text(name, "name")?) };
        session.runtime.block_on(session.session.delete_pool(name))?;
        Ok(())
    })
}

/// What `ferrite_pool_configure` changes. The values are the wire's.
pub type ferrite_pool_setting = u32;
/// Build a secondary index over the pool's keys (which `ferrite_find` then searches in key
/// order, and `FERRITE_FIND_NEXT` needs).
pub const FERRITE_POOL_ADD_INDEX: ferrite_pool_setting = 1;
/// Drop the pool's secondary index.
pub const FERRITE_POOL_REMOVE_INDEX: ferrite_pool_setting = 2;

/// Changes a setting of the existing pool `name`: `FERRITE_POOL_ADD_INDEX` or
/// `FERRITE_POOL_REMOVE_INDEX`. The server builds an index in steps while it serves, and this
/// returns once it is whole and the setting durable. Fails with `FERRITE_POOL_NOT_FOUND`, and
/// `FERRITE_PERMISSION_DENIED` without `admin` on the pool.
///
/// # Safety
/// `session` is NULL or a live session; `name` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn ferrite_pool_configure(
    session: *const ferrite_session,
    name: *const c_char,
    setting: ferrite_pool_setting,
) -> ferrite_status {
    guard(|| {
        // SAFETY: the caller promises a live session and a string.
        let (session, name) = unsafe { (args::object(session, "session")?, args::text(name, "name")?) };
        let setting =
            u16::try_from(setting).ok().and_then(|setting| PoolSetting::from_flags(setting).ok()).ok_or_else(|| {
                Failure::invalid(format!(
                    "setting {setting} is none of FERRITE_POOL_ADD_INDEX, FERRITE_POOL_REMOVE_INDEX"
                ))
            })?;
        session.runtime.block_on(session.session.configure_pool(name, setting))?;
        Ok(())
    })
}

/// Every shard's counters into `*out` (one entry per shard and counter), to be freed with
/// `ferrite_statistic_list_free`. On failure `*out` is empty.
///
/// # Safety
/// `session` is NULL or a live session; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_statistics(
    session: *const ferrite_session,
    out: *mut ferrite_statistic_list,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ferrite_statistic_list::EMPTY) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live session.
        let session = unsafe { args::object(session, "session")? };
        let shards = session.runtime.block_on(session.session.statistics())?;
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(ferrite_statistic_list::from_shards(shards)) };
        Ok(())
    })
}

/// Lists the pools of every shard into `*out`, to be freed with `ferrite_pool_info_list_free`.
/// On failure `*out` is empty.
///
/// # Safety
/// `session` is NULL or a live session; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_pool_list(
    session: *const ferrite_session,
    out: *mut ferrite_pool_info_list,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ferrite_pool_info_list::EMPTY) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live session.
        let session = unsafe { args::object(session, "session")? };
        let pools = session.runtime.block_on(session.session.list_pools())?;
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(ferrite_pool_info_list::from_pools(pools)) };
        Ok(())
    })
}
