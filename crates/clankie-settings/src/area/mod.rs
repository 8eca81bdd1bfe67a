//! One module per area, each the config file's section of the same name.

pub(crate) mod bus;
pub(crate) mod console;
pub(crate) mod core;
pub(crate) mod discord;
pub(crate) mod lanes;
pub(crate) mod local;
pub(crate) mod media;
pub(crate) mod model;
pub(crate) mod speech;
pub(crate) mod store;
pub(crate) mod testing;
pub(crate) mod tools;
pub(crate) mod voice;
