//! The offload-ts device library for kernels in Rust (`offload build kernels.rs`). The build
//! compiles it as the crate `offload` and links it: a kernel file is a `#![no_std]` crate that
//! writes `use offload::{team_id, num_teams};`.
//!
//! A kernel is `#[no_mangle] pub extern "C" fn` (or `pub unsafe extern "C" fn`) returning `()`,
//! taking scalars (i8..i64, u8..u64, isize, usize, f32, f64, bool) and raw pointers into device
//! memory (`*mut f32`, `*const f32`): a launch's Buffer arguments arrive as pointers. Kernels have
//! no heap (no `alloc` crate) and no standard library; a panic traps the launch with the
//! kernel's name.
//!
//! Each function is an import (module "offload") that the device answers for the invocation
//! running: the values are constant during one kernel call. `d` picks the dimension of the grid
//! (0 = x, 1 = y, 2 = z).
#![no_std]

mod imports {
    #[link(wasm_import_module = "offload")]
    extern "C" {
        pub fn team_id(d: i32) -> i32;
        pub fn num_teams(d: i32) -> i32;
        pub fn thread_id(d: i32) -> i32;
        pub fn num_threads(d: i32) -> i32;
        pub fn barrier();
        pub fn team_memory() -> *mut u8;
        pub fn print(message: *const u16, n: i32, a0: f64, a1: f64, a2: f64, a3: f64, a4: f64);
    }
}

/// Index of this invocation's team along dimension `d`, in `[0, num_teams(d))`.
#[inline(always)]
pub fn team_id(d: i32) -> i32 {
    unsafe { imports::team_id(d) }
}

/// Number of teams of the launch along dimension `d` (at least 1).
#[inline(always)]
pub fn num_teams(d: i32) -> i32 {
    unsafe { imports::num_teams(d) }
}

/// Index of this invocation's thread in its team along dimension `d`, in `[0, num_threads(d))`.
#[inline(always)]
pub fn thread_id(d: i32) -> i32 {
    unsafe { imports::thread_id(d) }
}

/// Number of threads per team along dimension `d` (at least 1).
#[inline(always)]
pub fn num_threads(d: i32) -> i32 {
    unsafe { imports::num_threads(d) }
}

/// Waits until every thread of this team has reached this barrier (as CUDA's `__syncthreads`).
#[inline(always)]
pub fn barrier() {
    unsafe { imports::barrier() }
}

/// Address of this team's team memory (the launch's `teamMemoryBytes`), shared by its threads.
#[inline(always)]
pub fn team_memory() -> *mut u8 {
    unsafe { imports::team_memory() }
}

/// A string literal as the device reads it: its byte length, then its UTF-16 code units.
#[doc(hidden)]
#[repr(C, align(4))]
pub struct Utf16Literal<const N: usize> {
    pub bytes: u32,
    pub text: [u16; N],
}

/// The UTF-16 code units of an ASCII literal (other bytes become '?').
#[doc(hidden)]
pub const fn utf16<const N: usize>(text: &str) -> [u16; N] {
    let bytes = text.as_bytes();
    let mut out = [0u16; N];
    let mut i = 0;
    while i < N {
        out[i] = if bytes[i] < 128 { bytes[i] as u16 } else { b'?' as u16 };
        i += 1;
    }
    out
}

#[doc(hidden)]
#[inline(always)]
pub fn print_values(message: *const u16, n: i32, a0: f64, a1: f64, a2: f64, a3: f64, a4: f64) {
    unsafe { imports::print(message, n, a0, a1, a2, a3, a4) }
}

/// `offload::print!("i, x:", i, x)`: prints a string literal and up to five numbers on the
/// launching program's stderr (as the AssemblyScript library's `print`).
#[macro_export]
macro_rules! print {
    (@emit $message:literal, $n:expr, $a0:expr, $a1:expr, $a2:expr, $a3:expr, $a4:expr) => {{
        const MESSAGE: &str = $message;
        static TEXT: $crate::Utf16Literal<{ MESSAGE.len() }> = $crate::Utf16Literal {
            bytes: (MESSAGE.len() * 2) as u32,
            text: $crate::utf16::<{ MESSAGE.len() }>(MESSAGE),
        };
        $crate::print_values(TEXT.text.as_ptr(), $n, $a0, $a1, $a2, $a3, $a4)
    }};
    ($message:literal $(,)?) => { $crate::print!(@emit $message, 0, 0.0, 0.0, 0.0, 0.0, 0.0) };
    ($message:literal, $a:expr $(,)?) => { $crate::print!(@emit $message, 1, $a as f64, 0.0, 0.0, 0.0, 0.0) };
    ($message:literal, $a:expr, $b:expr $(,)?) => {
        $crate::print!(@emit $message, 2, $a as f64, $b as f64, 0.0, 0.0, 0.0)
    };
    ($message:literal, $a:expr, $b:expr, $c:expr $(,)?) => {
        $crate::print!(@emit $message, 3, $a as f64, $b as f64, $c as f64, 0.0, 0.0)
    };
    ($message:literal, $a:expr, $b:expr, $c:expr, $d:expr $(,)?) => {
        $crate::print!(@emit $message, 4, $a as f64, $b as f64, $c as f64, $d as f64, 0.0)
    };
    ($message:literal, $a:expr, $b:expr, $c:expr, $d:expr, $e:expr $(,)?) => {
        $crate::print!(@emit $message, 5, $a as f64, $b as f64, $c as f64, $d as f64, $e as f64)
    };
}

/// A panic traps the launch (the device reports it with the kernel's name): no unwinding, no message.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}
