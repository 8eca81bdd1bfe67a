//! The CLI as a person runs it, and the workspace rules it stands for.

mod alerts;
mod audit;
mod chaos;
mod chaos_model_server;
mod deploy;
mod doctor;
mod erase;
mod healthcheck;
mod image;
mod invariants;
mod layout;
mod manifests;
mod modules;
mod operator;
mod restore;
mod run_voice;
mod secrets;
mod self_cli;
mod settings;
mod slash;
mod soak;
mod tap;
mod trace;
mod trail;
mod usage_cli;
mod voice_cli;
