//! Integer arenas from C (tier 1): `tests/c/vmem_test.c` calls every `vmarena_vmem_*`
//! function, with the refusals of each (nothing written, nothing changed), a JIT code range
//! under nocross, a device heap importing from a parent and returning its spans, and a
//! destruction refused while allocations are live.

mod common;

#[test]
fn a_c_program_uses_integer_arenas() {
    let (bin, libdir) = common::build_linked("vmem_test");
    let out =
        std::process::Command::new(&bin).env("LD_LIBRARY_PATH", &libdir).output().expect("run vmem_test");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stderr.contains("ok vmem") && stdout.contains(" 0 failed"),
        "{stdout}{stderr}"
    );
}
