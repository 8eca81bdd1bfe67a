// `sqlx::migrate!` embeds the migrations at compile time; a new or edited one must rebuild the crate.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
