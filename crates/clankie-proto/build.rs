//! Compiles `proto/clankie/v1` with protox (no system protoc) and keeps the
//! descriptor set so the tap can decode any event by name.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest.join("../../proto");
    let dir = root.join("clankie/v1");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir)?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "proto")).collect();
    files.sort();
    println!("cargo:rerun-if-changed={}", dir.display());
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(&files, [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("clankie_descriptor.bin"), prost::Message::encode_to_vec(&fds))?;
    prost_build::Config::new().enable_type_names().compile_fds(fds)?;
    Ok(())
}
