//! The bus against a real nats-server, one server per test.

mod connect;
mod consume;
mod schedules;
