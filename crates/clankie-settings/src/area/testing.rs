//! Test and bench knobs; read from the environment only.
use crate::setting::{Area, Kind, Service::*, Setting, Unit};

/// The `[testing]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(
        Area::Testing,
        "CLANKIE_FAULT",
        Kind::List,
        "unset",
        "Fault points a test arms: a comma-separated list of point names where the process exits (tests only).",
        &[Tests],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_FAULT_HOLD",
        Kind::List,
        "unset",
        "Fault points where the process waits: `point=ms`, comma-separated (tests only).",
        &[Tests],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_FAULT_PANIC",
        Kind::List,
        "unset",
        "Fault points where the process panics (tests only).",
        &[Tests],
    )
    .env_only(),
    Setting::new(Area::Testing, "CLANKIE_FUZZ_CASES", Kind::Count, "10000", "Cases each `fuzz_` test tries.", &[Tests]).env_only(),
    Setting::new(Area::Testing, "CLANKIE_CHAOS_ROUNDS", Kind::Count, "CI-sized", "Rounds of each chaos test (long mode: more).", &[Tests])
        .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_CHAOS_SEED",
        Kind::Count,
        "random, printed",
        "The seed of the chaos tests' choices, to replay a failure.",
        &[Tests],
    )
    .env_only(),
    Setting::new(Area::Testing, "CLANKIE_BARRIER_ROUNDS", Kind::Count, "CI-sized", "Rounds of the bus's barrier test.", &[Tests])
        .env_only(),
    Setting::new(Area::Testing, "CLANKIE_ERASE_CASES", Kind::Count, "CI-sized", "Cases of the erase property test.", &[Tests]).env_only(),
    Setting::new(Area::Testing, "CLANKIE_ERASE_SEED", Kind::Count, "random, printed", "The seed of the erase property test.", &[Tests])
        .env_only(),
    Setting::new(Area::Testing, "CLANKIE_LIMITER_ROUNDS", Kind::Count, "CI-sized", "Rounds of the REST limiter test.", &[Tests]).env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_REST_BUDGET_SECS",
        Kind::Duration(Unit::Seconds),
        "CI-sized",
        "How long the REST budget test runs.",
        &[Tests],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_RETENTION_MESSAGES_PER_DAY",
        Kind::Count,
        "CI-sized",
        "Messages a day the retention test seeds.",
        &[Tests],
    )
    .env_only(),
    Setting::new(Area::Testing, "CLANKIE_SOAK_SECS", Kind::Duration(Unit::Seconds), "CI-sized", "How long the soak test runs.", &[Tests])
        .env_only(),
    Setting::new(Area::Testing, "CLANKIE_VOICE_CLIPS", Kind::Count, "CI-sized", "Voice clips each voice test plays.", &[Tests]).env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_TEST_DATABASE_URL",
        Kind::Url,
        "CLANKIE_DATABASE_URL",
        "The PostgreSQL the tests make their databases in.",
        &[Tests],
    )
    .credentials()
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_TEST_MODEL_PROVIDER",
        Kind::Choice(&["openai", "anthropic"]),
        "unset",
        "The wire the sandbox tests' stacks speak to the model stand-in unless a test names its own; the suite runs its anthropic_, erase_, message_delete_ and message_edit_ tests again with `anthropic`, the strict Messages API stand-in.",
        &[Tests],
    )
    .env_only(),
    Setting::new(Area::Testing, "CLANKIE_TEST_VOICE_LOG", Kind::Flag, "unset", "Prints the voice tests' timelines.", &[Tests]).env_only(),
    Setting::new(Area::Testing, "CLANKIE_INGEST_BURST", Kind::Count, "20000", "Messages in the gateway's `ingest_` burst test (long mode: more).", &[Tests])
        .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_UPDATE_SCREENSHOTS",
        Kind::Flag,
        "false",
        "The console's screenshot test writes new references instead of comparing.",
        &[Tests],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_WITH_BROWSER",
        Kind::Choice(&["auto", "on", "off"]),
        "auto",
        "Whether `deploy/local` installs Chromium for the `browse` tool and its tests.",
        &[Tests],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_WITH_MANIFEST_TOOLS",
        Kind::Choice(&["auto", "on", "off"]),
        "auto",
        "Whether `deploy/local/test` installs the tools that validate the manifests.",
        &[Tests],
    )
    .env_only(),
    Setting::new(Area::Testing, "CLANKIE_BENCH_BARE", Kind::Flag, "false", "The bench runs without the embedded stack's extras.", &[Bench])
        .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_BENCH_GATEWAY_MESSAGES",
        Kind::Count,
        "bench-sized",
        "Messages of the mix the gateway bench dispatches at once through one gateway, for its ingest rate.",
        &[Bench],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_BENCH_GATEWAY_MIX",
        Kind::Count,
        "2000",
        "Messages of the mix the gateway bench sends at 200 a second through the whole stack, for a mention's time to admission and the REST calls.",
        &[Bench],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_BENCH_INGEST_SECS",
        Kind::Duration(Unit::Seconds),
        "bench-sized",
        "How long the ingest bench runs.",
        &[Bench],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_BENCH_MESSAGES_PER_DAY",
        Kind::Count,
        "bench-sized",
        "Messages a day the retention bench assumes.",
        &[Bench],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_BENCH_MODEL",
        Kind::Text,
        "the rehearsal model",
        "The model the economy bench replays against.",
        &[Bench],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_BENCH_REST_SECS",
        Kind::Duration(Unit::Seconds),
        "bench-sized",
        "How long the REST bench runs.",
        &[Bench],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_BENCH_MIX_ROUNDS",
        Kind::Count,
        "6",
        "Rounds of the economy-mix conversation (two bursts in #general, one in #lobbies, a voice line each).",
        &[Bench],
    )
    .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_BENCH_MIX_BUDGET_TOKENS",
        Kind::Count,
        "4000",
        "The captain's context budget in the economy-mix replay.",
        &[Bench],
    )
    .env_only(),
    Setting::new(Area::Testing, "CLANKIE_BENCH_SHOW", Kind::Flag, "false", "The bench prints its request bodies' shapes.", &[Bench])
        .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_BENCH_DAY_LANES",
        Kind::Text,
        "1000,10000,100000",
        "The scales the bench's `day` runs, as the lanes the store holds as the day begins, comma-separated.",
        &[Bench],
    )
    .env_only(),
    Setting::new(Area::Testing, "CLANKIE_BENCH_DAY_MESSAGES", Kind::Count, "20000", "Messages in each of the bench's `day` runs.", &[Bench])
        .env_only(),
    Setting::new(Area::Testing, "CLANKIE_BENCH_DAY_RATE", Kind::Decimal, "40", "Messages a second the bench's `day` writes.", &[Bench])
        .env_only(),
    Setting::new(
        Area::Testing,
        "CLANKIE_BENCH_DAY_PLOT",
        Kind::Text,
        "day.svg",
        "Where the bench's `day` writes its plot of CPU per 1,000 messages against lanes (SVG).",
        &[Bench],
    )
    .env_only(),
    Setting::new(Area::Testing, "CLANKIE_BENCH_DAY_LOG", Kind::Text, "warn", "The services' `CLANKIE_LOG` in the bench's `day`.", &[Bench])
        .env_only(),
];
