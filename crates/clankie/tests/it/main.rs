//! The CLI as a person runs it, and the workspace rules it stands for.

mod invariants;
mod secrets;
mod self_cli;
mod tap;
mod trail;
