//! The whole embedded stack, scenario by scenario: loopback Discord → gateway →
//! NATS → captain → gateway → loopback Discord, with real NATS, PostgreSQL and
//! the model stand-in, durations compressed.

mod browse;
mod browser;
mod changes;
mod cluster;
mod console;
mod interactions;
mod media;
mod scenarios;
mod supervise;
mod voice;

pub use clankie_sandbox::rig::{GENERAL, Rig, until};
