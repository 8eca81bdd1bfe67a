//! The tools: browse, read_page, the outbound address guard.
use crate::setting::{Area, Kind, Service::*, Setting, Unit};

/// The `[tools]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(
        Area::Tools,
        "CLANKIE_EGRESS_ALLOW",
        Kind::List,
        "empty: only public addresses",
        "Addresses tools may fetch although not public, comma-separated `ip`, `ip/prefix` or `ip:port`; for loopback stand-ins.",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Tools,
        "CLANKIE_BROWSE",
        Kind::Choice(&["auto", "on", "off"]),
        "auto",
        "The `browse` tool (headless Chromium): `auto` turns it on when Chromium and chromedriver are installed, `on` requires them, `off`.",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Tools,
        "CLANKIE_BROWSERS_MAX",
        Kind::Count,
        "2",
        "Browsers one captain runs at once; further browses queue.",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Tools,
        "CLANKIE_BROWSE_DEADLINE_MS",
        Kind::Duration(Unit::Millis),
        "30000",
        "How long one browse may take once it has a browser; past it the tool answers with an error and the browser is killed.",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Tools,
        "CLANKIE_BROWSER_VIEWPORT",
        Kind::Text,
        "1280x800",
        "The browser's viewport, and so a screenshot's size, as `WIDTHxHEIGHT`.",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Tools,
        "CLANKIE_CHROMIUM",
        Kind::Path,
        "/usr/bin/chromium",
        "The Chromium binary the browser host starts.",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Tools,
        "CLANKIE_CHROMEDRIVER",
        Kind::Path,
        "/usr/bin/chromedriver",
        "The chromedriver binary the browser host starts.",
        &[Captain, Run],
    ),
];
