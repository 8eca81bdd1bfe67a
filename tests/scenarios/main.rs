//! The incidents the design records start from, replayed through the whole stack
//! (loopback Discord → gateway → NATS → captain or voice floor → gateway →
//! loopback Discord) with real NATS, PostgreSQL and the model stand-in, and time
//! compressed. One module per incident, numbered as in the issue.

mod s1_burst;
mod s2_lost_reply;
mod s3_dead_stream;
mod s4_long_work;
mod s5_voice_chat;
mod s6_resume;
mod s7_one_self;
