//! The shim is marked not to be unloaded (`-z nodelete`), as `libvmarena.so` is (see that
//! crate's build script): a program may `dlopen` it (or a library that depends on it) and
//! `dlclose` it while vmarena's helper threads run its code.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
