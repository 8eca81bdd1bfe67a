//! "say something in vc clankie": typed in the voice channel's chat, it got two text
//! replies and no voice. Now the voice room owns it and answers aloud.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::{Family, v1};
use clankie_sandbox::rig::{GENERAL, Rig, until};

const VOICE: u64 = 300;

#[tokio::test]
async fn text_in_the_voice_channels_chat_is_answered_by_the_voice_room_with_no_text_reply() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let speaks = clankie_testkit::record::<v1::Speak>(&bus, Family::VoiceSpeak).await;
    let decisions = clankie_testkit::record::<v1::FloorDecision>(&bus, Family::VoiceFloor).await;
    let text = clankie_testkit::record::<v1::Ingress>(&bus, Family::IngressText).await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.voice_live(VOICE, "ada").await;
    rig.standin.script(Script::when("spoken aloud", Reply::text("Hello, everyone in here!")));
    let id = rig.say(VOICE, "ada", "say something in vc clankie");
    until("the voice answer", Duration::from_secs(20), || !speaks.all().is_empty()).await;
    assert_eq!(speaks.all().len(), 1);
    assert_eq!(speaks.all()[0].delivery_id, id.to_string());
    let decided: Vec<_> = decisions.all().into_iter().filter(|d| d.delivery_id == id.to_string()).collect();
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].verdict, v1::FloorVerdict::Wake as i32);
    // Barriers instead of a nap: the response's playback receipt ends its work in the voice room,
    // and the gateway publishes in dispatch order, so a later text message's ingress comes after
    // any text ingress the voice line could have caused.
    until("the playback receipt", Duration::from_secs(20), || {
        receipts.all().iter().any(|r| r.kind == "voice.playback" && r.delivery_id == id.to_string())
    })
    .await;
    let sentinel = rig.say(GENERAL, "bob", "sentinel");
    until("the sentinel's ingress", Duration::from_secs(20), || text.all().iter().any(|i| i.delivery_id == sentinel.to_string())).await;
    assert!(rig.sandbox.discord.posts(VOICE).is_empty(), "a text reply in the voice chat");
    let texts: Vec<String> = text.all().into_iter().map(|i| i.delivery_id).collect();
    assert_eq!(texts, [sentinel.to_string()], "a captain text turn for a voice-room line");
}
