//! `vmarena_version`: the library's version as a number.
#![allow(unsafe_code)]

/// `unsigned vmarena_version(void);` the library's version, `major << 16 | minor << 8 | patch`
/// (the header's `VMARENA_VERSION` is what a program was compiled against).
#[no_mangle]
pub extern "C" fn vmarena_version() -> libc::c_uint {
    const fn num(s: &str) -> u32 {
        let b = s.as_bytes();
        let mut i = 0;
        let mut v = 0;
        while i < b.len() {
            v = v * 10 + (b[i] - b'0') as u32;
            i += 1;
        }
        v
    }
    const V: u32 = num(env!("CARGO_PKG_VERSION_MAJOR")) << 16
        | num(env!("CARGO_PKG_VERSION_MINOR")) << 8
        | num(env!("CARGO_PKG_VERSION_PATCH"));
    V
}
