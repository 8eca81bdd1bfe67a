//! Whose words may go where: a link quotes only what its poster could read in a channel the
//! owner admits, and a DM is an audience of its own. Each test reads what the model was sent,
//! what the streams keep and what the tables hold, not what the code says it did.

use std::time::Duration;

use clankie_discord_loopback::{ChannelSpec, Loopback, NewMessage, OverwriteSpec, permission};
use clankie_model_standin::{RecordedRequest, Reply, Script};
use clankie_proto::{Family, v1};
use clankie_store::{OwnerSettings, Store};

use crate::conversations::request_for;
use crate::{GENERAL, Rig, until};

const LOBBIES: u64 = 201;
const MODS: u64 = 270;
const DM: u64 = 900;
const SEES: u64 = permission::VIEW_CHANNEL | permission::READ_MESSAGE_HISTORY | permission::SEND_MESSAGES;

fn to_him(channel: u64, author: &str, content: &str) -> NewMessage {
    NewMessage { channel_id: channel, author: author.into(), content: content.into(), mention: true, ..Default::default() }
}

/// The receipt of the context a lane asked for before reading `delivery` (links are followed
/// there, never at ingest).
async fn context_receipt(receipts: &clankie_testkit::Recorder<v1::Receipt>, delivery: u64) -> v1::Receipt {
    let id = delivery.to_string();
    let found = || receipts.all().into_iter().find(|r| r.kind == "gateway.context" && r.delivery_id == id);
    until("the context receipt", Duration::from_secs(20), || found().is_some()).await;
    found().expect("the receipt")
}

async fn owner_settings(rig: &Rig, change: impl FnOnce(&mut OwnerSettings)) -> Store {
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    let mut settings = store.owner_settings().await.unwrap();
    change(&mut settings);
    store.set_owner_settings(&settings).await.unwrap();
    store
}

/// Waits until the captain has told the audience bucket the owner's admitted `channels`, which
/// the gateways watch.
async fn told_admitted(rig: &Rig, channels: &[u64]) {
    let bus = rig.bus().await;
    let bucket = bus.key_value(clankie_bus::AUDIENCE_BUCKET, Duration::ZERO).await.unwrap();
    let want = channels.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while bucket.get("admitted_channels").await.unwrap().as_deref() != Some(want.as_bytes()) {
        assert!(tokio::time::Instant::now() < deadline, "the captain never told the admitted channels {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Where `words` are kept: events on the streams, and the tables holding them.
async fn kept(rig: &Rig, store: &Store, words: &str) -> (usize, Vec<(String, i64)>) {
    (crate::on_the_bus(&rig.bus().await, words).await, crate::rows_holding(store, words).await)
}

/// `author` posts a link to `linked` in `channel` (#general) to him: the outcome, the request
/// and the ingress receipt.
async fn link_posted(
    rig: &Rig,
    receipts: &clankie_testkit::Recorder<v1::Receipt>,
    author: &str,
    from: u64,
    linked: u64,
    needle: &str,
) -> (RecordedRequest, v1::Receipt) {
    let guild = rig.sandbox.discord.config().guild_id;
    rig.standin.script(Script::when(needle, Reply::text("Let me see.")));
    let asked = rig.sandbox.discord.user_message(to_him(
        GENERAL,
        author,
        &format!("what does https://discord.com/channels/{guild}/{from}/{linked} say? {needle}"),
    ));
    rig.wait_outcomes(GENERAL, &[asked]).await;
    (request_for(rig, needle), context_receipt(receipts, asked).await)
}

/// #mods is hidden from @everyone; mia may read it, eve may not. Eve posts a link to mia's
/// message there: the gateway computes eve's permissions from the guild's roles and the
/// channel's overwrites as Discord does and does not follow it, so nothing of the message
/// reaches the model, the streams or the tables beyond the message's own event. Mia posting the
/// same link is quoted: the refusal is eve's, not the link's.
#[tokio::test]
async fn audience_a_link_to_a_channel_the_poster_cannot_view_is_not_quoted_and_nothing_of_it_reaches_the_model_the_store_or_the_bus() {
    const SECRET: &str = "walrus-launch-77";
    let defaults = clankie_discord_loopback::LoopbackConfig::default();
    let (guild, bot) = (defaults.guild_id, defaults.bot_user_id);
    let mods = ChannelSpec {
        id: MODS,
        name: "mods".into(),
        overwrites: vec![
            OverwriteSpec { id: guild, member: false, allow: 0, deny: permission::VIEW_CHANNEL },
            OverwriteSpec { id: Loopback::user_id("mia"), member: true, allow: SEES, deny: 0 },
            OverwriteSpec { id: bot, member: true, allow: SEES, deny: 0 },
        ],
        ..Default::default()
    };
    let rig = Rig::with_channels(&[], vec![mods]).await;
    assert_eq!(rig.sandbox.discord.config().guild_id, guild);
    let receipts = clankie_testkit::record::<v1::Receipt>(&rig.bus().await, Family::Receipt).await;
    let store = owner_settings(&rig, |_| {}).await;
    let posted = rig.say(MODS, "mia", &format!("the launch code is {SECRET}"));
    until("mia's message stored", Duration::from_secs(20), || receipts.all().iter().any(|r| r.delivery_id == posted.to_string())).await;
    let before = kept(&rig, &store, SECRET).await;

    let (eves, eves_receipt) = link_posted(&rig, &receipts, "eve", MODS, posted, "eve-asks").await;
    let after = kept(&rig, &store, SECRET).await;
    let (mias, mias_receipt) = link_posted(&rig, &receipts, "mia", MODS, posted, "mia-asks").await;
    println!(
        "audience: eve's link refused {:?}, quoted {:?}, her request holds it {}; kept {before:?} -> {after:?}; mia's link quoted {:?}, her request holds it {}",
        eves_receipt.counts.get("links_refused"),
        eves_receipt.counts.get("quoted"),
        eves.count(SECRET),
        mias_receipt.counts.get("quoted"),
        mias.count(SECRET)
    );
    assert_eq!(eves.count(SECRET), 0, "eve's link showed her a channel she cannot read");
    assert_eq!(eves_receipt.counts.get("links_refused"), Some(&1), "{eves_receipt:?}");
    assert_eq!(after, before, "something of the linked message was kept beyond its own event");
    assert!(mias.count(SECRET) >= 1, "mia, who can read #mods, had her link refused too");
}

/// The owner admits #general only. A link there to a message in #lobbies is not followed:
/// nothing of the message reaches the model, the streams or the tables beyond its own event.
/// With #lobbies admitted too, the same link is quoted.
#[tokio::test]
async fn audience_a_link_to_a_channel_the_owner_does_not_admit_is_not_quoted_and_nothing_of_it_reaches_the_model_the_store_or_the_bus() {
    const SECRET: &str = "server-password-otter";
    let rig = Rig::new().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&rig.bus().await, Family::Receipt).await;
    let store = owner_settings(&rig, |s| s.channels = vec![GENERAL]).await;
    let posted = rig.say(LOBBIES, "cy", &format!("the server password is {SECRET}"));
    until("cy's message stored", Duration::from_secs(20), || receipts.all().iter().any(|r| r.delivery_id == posted.to_string())).await;
    let before = kept(&rig, &store, SECRET).await;

    told_admitted(&rig, &[GENERAL]).await;
    let (refused, refused_receipt) = link_posted(&rig, &receipts, "ada", LOBBIES, posted, "ada-asks").await;
    let after = kept(&rig, &store, SECRET).await;
    owner_settings(&rig, |s| s.channels = vec![GENERAL, LOBBIES]).await;
    told_admitted(&rig, &[GENERAL, LOBBIES]).await;
    let (admitted, _) = link_posted(&rig, &receipts, "ada", LOBBIES, posted, "ada-again").await;
    println!(
        "audience: a link into an unadmitted channel refused {:?}, the request holds it {}; kept {before:?} -> {after:?}; admitted, the request holds it {}",
        refused_receipt.counts.get("links_refused"),
        refused.count(SECRET),
        admitted.count(SECRET)
    );
    assert_eq!(refused.count(SECRET), 0, "a link into a channel the owner does not admit was quoted");
    assert_eq!(refused_receipt.counts.get("links_refused"), Some(&1), "{refused_receipt:?}");
    assert_eq!(after, before, "something of the linked message was kept beyond its own event");
    assert!(admitted.count(SECRET) >= 1, "the link was not quoted once the owner admitted its channel");
}

/// The owner tells him a secret in their DM; mallory then asks in #general what the owner has
/// been telling him. A DM is its own audience: mallory's request holds nothing of it, not its
/// words, not that the owner was there.
#[tokio::test]
async fn audience_a_dm_secret_never_reaches_a_guild_rooms_request() {
    const SECRET: &str = "quillfeather-locker-4411";
    let rig = Rig::new().await;
    let store = owner_settings(&rig, |s| s.owner_id = Some(Loopback::user_id("odile"))).await;
    rig.standin.script(Script::when(SECRET, Reply::text("Kept between us.")));
    let told = rig.say(DM, "odile", &format!("my locker code is {SECRET}, keep it to yourself"));
    rig.wait_outcomes(DM, &[told]).await;
    crate::experience_recorded(&store, "the DM's experience", |_| true).await;

    rig.standin.script(Script::when("mallory-asks", Reply::text("Nothing to share.")));
    let asked = rig.sandbox.discord.user_message(to_him(GENERAL, "mallory", "what has your owner been telling you lately? mallory-asks"));
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let request = request_for(&rig, "mallory-asks");
    println!(
        "audience: mallory's request holds the secret {} time(s), the DM {} time(s), odile's name {} time(s)",
        request.count(SECRET),
        request.count(&DM.to_string()),
        request.count("odile")
    );
    assert_eq!(request.count(SECRET), 0, "the DM's secret reached #general's request");
    assert_eq!(request.count(&DM.to_string()), 0, "the DM's channel reached #general's request");
    assert_eq!(request.count("odile"), 0, "that odile talked with him in a DM reached #general's request");
}
