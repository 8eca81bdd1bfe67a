//! The operator console.
use crate::setting::{Area, Kind, Service::*, Setting};

/// The `[console]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(
        Area::Console,
        "CLANKIE_CONSOLE_ADDR",
        Kind::Addr,
        "127.0.0.1:8790",
        "Where the operator console listens (`clankie console`, and `clankie run`'s embedded one).",
        &[Console, Run],
    ),
    Setting::new(
        Area::Console,
        "CLANKIE_CONSOLE_TOKEN",
        Kind::Text,
        "unset: clankie console refuses to start; clankie run makes one and prints the console's URL with it",
        "The operator console's token: every route wants it as `Authorization: Bearer <token>` or `?token=`, and answers 401 without it.",
        &[Console, Run, Cli],
    )
    .secret()
    .must_set(),
    Setting::new(
        Area::Console,
        "CLANKIE_TRACE_URL",
        Kind::Text,
        "unset: the trail shows the trace id without a link",
        "Your trace viewer's page for one trace, with `{trace_id}` where the id goes (Jaeger: `http://jaeger:16686/trace/{trace_id}`): the console's trail links to it and `clankie trail` prints it.",
        &[Console, Run, Cli],
    ),
];
