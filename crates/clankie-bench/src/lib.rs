//! The parts of the bench a test can drive as well: `day`, whose short mode CI runs
//! (`day_` in the `clankie` crate's tests) and whose full mode the bench prints.

pub mod day;
pub mod figures;
