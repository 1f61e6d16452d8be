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

/// Zeroes every byte of the pool's memory but the call's own value, as a plugin with a wild
/// pointer might, through the read-only bytes the SDK lends: the host's pool mapping must refuse
/// the first of these writes (the host faults, the call fails) before any key is hurt.
#[allow(unsafe_code)]
pub fn smash_pool(call: &Call<'_>) -> Result<(), PluginError> {
    let region_bytes = call.pool_info()?.region_bytes;
    let len = usize::try_from(region_bytes).map_err(|_| PluginError::invalid("faulty: region size"))?;
    let pool = call.pool_bytes(0, len)?;
    let own = call.value_offset() as usize..call.value_offset() as usize + call.value().len();
    let base = pool.as_ptr().cast_mut();
    for index in (0..len).filter(|index| !own.contains(index)) {
        // SAFETY: none, deliberately: a stray write into pool memory the call was not given.
        unsafe { std::ptr::write_volatile(base.add(index), 0) };
    }
    Ok(())
}

/// Leaves a thread behind that zeroes the pool's memory `after` the call has returned, as a
/// plugin that kept a pointer (or a thread of its own) past its call might.
#[allow(unsafe_code)]
pub fn smash_pool_later(call: &Call<'_>, after: std::time::Duration) -> Result<(), PluginError> {
    let region_bytes = call.pool_info()?.region_bytes;
    let len = usize::try_from(region_bytes).map_err(|_| PluginError::invalid("faulty: region size"))?;
    // An address, not a pointer: the thread outlives the borrow on purpose.
    let base = call.pool_bytes(0, len)?.as_ptr() as usize;
    std::thread::spawn(move || {
        std::thread::sleep(after);
        for index in 0..len {
            // SAFETY: none, deliberately: a write through a pointer kept past its call.
            unsafe { std::ptr::write_volatile((base as *mut u8).add(index), 0) };
        }
    });
    Ok(())
}
