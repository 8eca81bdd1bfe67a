//! Voice on the shard: voice states and server updates forwarded, commands sent as op 4.

use std::time::Duration;

use clankie_bus::now_ms;
use clankie_proto::{Family, Subject, v1};

use super::{GUILD, Rig, VOICE_CHAT, record, until};

#[tokio::test]
async fn voice_join_a_command_becomes_op_4_and_his_voice_state_and_server_come_back_as_events() {
    let rig = Rig::new().await;
    let members = record::<v1::VoiceMember>(&rig.bus, Family::VoiceMember).await;
    let servers = record::<v1::VoiceServer>(&rig.bus, Family::VoiceServer).await;
    let (gateway, _task) = rig.gateway().await;

    // A human's voice state is forwarded, not marked as his.
    let ada = rig.discord.voice_join(VOICE_CHAT, "ada").unwrap();
    until("ada's voice state", Duration::from_secs(10), || {
        members.all().iter().any(|m| m.user_id == ada && m.channel_id == Some(VOICE_CHAT))
    })
    .await;
    let theirs = members.all().into_iter().find(|m| m.user_id == ada).unwrap();
    assert!(!theirs.is_him && theirs.session_id.is_empty(), "another user's session id is not passed on");

    // The voice floor's keeper asks for op 4 (the owner's own joins go through the keeper).
    let join = v1::VoiceCommand { guild_id: GUILD, channel_id: Some(VOICE_CHAT), reason: "keep".into(), epoch: 0, at_ms: now_ms() };
    rig.bus.publish(&Subject::VoiceCommand { guild: GUILD }, &join, None).await.unwrap();
    until("his voice state", Duration::from_secs(10), || members.all().iter().any(|m| m.is_him && m.channel_id == Some(VOICE_CHAT))).await;
    until("the voice server", Duration::from_secs(10), || !servers.all().is_empty()).await;
    let him = members.all().into_iter().find(|m| m.is_him).unwrap();
    assert_eq!(him.user_id, gateway.bot_id());
    assert!(!him.session_id.is_empty(), "his voice session id comes with his state");
    let server = servers.all().remove(0);
    assert_eq!(server.endpoint.as_deref(), Some(rig.discord.voice().endpoint().as_str()));
    assert!(!server.token.is_empty());

    let leave = v1::VoiceCommand { guild_id: GUILD, channel_id: None, reason: "owner".into(), epoch: 0, at_ms: now_ms() };
    rig.bus.publish(&Subject::VoiceCommand { guild: GUILD }, &leave, None).await.unwrap();
    until("him out of voice", Duration::from_secs(10), || {
        members.all().iter().filter(|m| m.is_him).last().is_some_and(|m| m.channel_id.is_none())
    })
    .await;

    // A null endpoint is forwarded as such: the voice side waits for the next update.
    rig.discord.voice_server_update(true);
    until("the null endpoint", Duration::from_secs(10), || servers.all().iter().any(|s| s.endpoint.is_none())).await;
}

#[tokio::test]
async fn voice_join_states_of_a_guild_not_admitted_are_not_forwarded() {
    let rig = Rig::new().await;
    let members = record::<v1::VoiceMember>(&rig.bus, Family::VoiceMember).await;
    let mut config = rig.gateway_config();
    config.guilds = vec![GUILD + 1];
    let (_gateway, _task) = rig.gateway_with(config).await;
    rig.discord.voice_join(VOICE_CHAT, "ada").unwrap();
    // The shard handles events in order and each publish waits for JetStream's ack, so once the
    // later message's rejection is in, a forwarded voice state would already be stored.
    let receipts = record::<v1::Receipt>(&rig.bus, Family::Receipt).await;
    let barrier = rig.say(VOICE_CHAT, "ada", "anyone?");
    until("the barrier's rejection", Duration::from_secs(10), || receipts.all().iter().any(|r| r.delivery_id == barrier.to_string())).await;
    assert_eq!(rig.stream_count("CLANKIE_VOICE").await, 0, "a voice state from a guild not admitted was stored");
    assert!(members.all().is_empty(), "a voice state from a guild not admitted was forwarded");
}
