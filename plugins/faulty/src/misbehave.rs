//! The misbehaviours themselves, one function each. Those that kill the process are
//! deliberately unsound or endless: that is their job.

use std::hint::black_box;

use ferrite_plugin::{Call, PluginError};

/// The byte `write-then-fail` fills the value with.
pub const WRITE_THEN_FAIL_BYTE: u8 = 0xEE;

/// The byte `undeclared` fills the value with.
pub const UNDECLARED_BYTE: u8 = 0x55;

/// Bytes `oom` asks for at a time.
const OOM_CHUNK_BYTES: usize = 64 << 20;
const PAGE_BYTES: usize = 4096;

pub fn panic() -> ! {
    panic!("faulty: panicking as asked");
}

pub fn abort() -> ! {
    std::process::abort();
}

/// Writes through a null pointer, which the kernel answers with SIGSEGV.
#[allow(unsafe_code)]
pub fn segv() {
    // SAFETY: none, deliberately: this write is meant to crash the host process so the server's
    // containment can be tested. Volatile, so the compiler keeps it.
    unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u8>(), 1) };
}

/// Spins forever; `black_box` keeps the compiler from proving the loop does nothing.
pub fn endless_loop() -> ! {
    let mut spins = 0u64;
    loop {
        spins = black_box(spins.wrapping_add(1));
    }
}

/// Allocates heap memory without bound, touching every page so it is really used.
pub fn unbounded_memory() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; OOM_CHUNK_BYTES];
        for page in chunk.iter_mut().step_by(PAGE_BYTES) {
            *page = 1;
        }
        hoard.push(black_box(chunk));
    }
}

/// How long `slow-bump` waits before it writes.
const SLOW_BUMP_WAIT: std::time::Duration = std::time::Duration::from_millis(300);

/// Waits, then adds one to the value's first byte and succeeds: a correct but slow call, during
/// which other clients change the pool (and its table moves entries about).
pub fn slow_bump(call: &mut Call<'_>) -> Result<(), PluginError> {
    std::thread::sleep(SLOW_BUMP_WAIT);
    let value = call.value_range_mut(0..1)?;
    value[0] = value[0].wrapping_add(1);
    Ok(())
}

/// Declares and overwrites the value, then fails: the host must put the old bytes back.
pub fn write_then_fail(call: &mut Call<'_>) -> Result<(), PluginError> {
    call.value_mut()?.fill(WRITE_THEN_FAIL_BYTE);
    Err(PluginError::failed("faulty: failing after overwriting the value, as asked"))
}

/// Overwrites the value without declaring it, then succeeds: a bug the host's checking mode
/// must report.
#[allow(unsafe_code)]
pub fn undeclared(call: &mut Call<'_>) -> Result<(), PluginError> {
    let value = call.value();
    let (data, len) = (value.as_ptr().cast_mut(), value.len());
    for index in 0..len {
        // SAFETY: none, deliberately: the SDK lends no writable bytes without declaring them, so
        // this bypasses it through the shared borrow's pointer, as a buggy plugin might. The
        // bytes lie in pool memory that is writable; volatile keeps the writes.
        unsafe { std::ptr::write_volatile(data.add(index), UNDECLARED_BYTE) };
    }
    Ok(())
}
