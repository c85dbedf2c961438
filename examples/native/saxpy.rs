//! saxpy in Rust, an offload-ts kernel: `offload build examples/native/saxpy.rs -o build/saxpy`
//! (rustc with the wasm32-unknown-unknown standard library; `offload demo` builds and checks it
//! on every wasm device). A kernel is a `#[no_mangle] pub extern "C" fn` returning (): its
//! scalars and raw pointers (device buffers) are its parameters, read by the build from here.
#![no_std]
use offload::{num_teams, num_threads, team_id, thread_id};

/// y = a * x + y over n floats; each team takes a contiguous block, its threads stride through it.
#[no_mangle]
pub unsafe extern "C" fn saxpy(n: i32, a: f32, x: *const f32, y: *mut f32) {
    let teams = num_teams(0);
    let block = (n + teams - 1) / teams;
    let start = team_id(0) * block;
    let end = if start + block < n { start + block } else { n };
    let mut i = start + thread_id(0);
    while i < end {
        let at = i as usize;
        *y.add(at) = a * *x.add(at) + *y.add(at);
        i += num_threads(0);
    }
}
