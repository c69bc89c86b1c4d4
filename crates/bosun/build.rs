//! The release binary's functions that `bosun run` executes are laid out together
//! (lld's `--symbol-ordering-file`, with `hot-symbols.txt`, made by `make hot-symbols`).
//!
//! The kernel maps a binary's page-cached text in 64 KB windows around every page a
//! process touches; after LTO the manager's few thousand functions are spread over the
//! whole text, so nearly all of it was resident (12 of 14.5 MB). Together they fill
//! about 2.5 MB. A symbol the list names that no longer exists is skipped, and one it
//! does not name goes after the listed ones: a stale list costs memory, never
//! correctness. `BOSUN_SYMBOL_ORDER=off` leaves the layout to the linker (for a linker
//! other than lld, the default of Rust on x86_64 Linux since 1.90).

fn main() {
    println!("cargo:rerun-if-changed=hot-symbols.txt");
    println!("cargo:rerun-if-env-changed=BOSUN_SYMBOL_ORDER");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let target = std::env::var("TARGET").unwrap_or_default();
    let off = std::env::var("BOSUN_SYMBOL_ORDER").as_deref() == Ok("off");
    if release && target == "x86_64-unknown-linux-gnu" && !off {
        let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
        let list = std::path::Path::new(&dir).join("hot-symbols.txt");
        if list.exists() {
            println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", list.display());
            println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
        }
    }
}
