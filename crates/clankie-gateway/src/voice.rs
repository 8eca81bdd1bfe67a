//! Voice on the shard: voice states and voice server updates forwarded as events, join or
//! leave commands turned into op 4, and each guild's live voice session kept for routing. The
//! audio itself never passes through the gateway; the voice-floor service connects songbird's
//! driver from what is forwarded here.

use std::time::Duration;

use clankie_bus::{ConsumerSpec, now_ms};
use clankie_proto::{Family, Subject, v1};
use twilight_model::gateway::payload::incoming::VoiceServerUpdate;
use twilight_model::gateway::payload::outgoing::UpdateVoiceState;
use twilight_model::id::Id;
use twilight_model::voice::VoiceState;

use crate::error::GatewayError;
use crate::state::Gateway;

impl Gateway {
    /// Whether the gateway serves `guild` (`CLANKIE_DISCORD_GUILDS`; empty admits every guild).
    pub(crate) fn admitted(&self, guild: u64) -> bool {
        let guilds = &self.config().guilds;
        guilds.is_empty() || guilds.contains(&guild)
    }

    /// Forwards one voice state of an admitted guild; his own carries his voice session id.
    pub(crate) async fn voice_state(&self, state: &VoiceState) {
        let Some(guild) = state.guild_id.map(|g| g.get()) else { return };
        if !self.admitted(guild) {
            return;
        }
        let user = state.user_id.get();
        let is_him = user == self.bot_id();
        let member = v1::VoiceMember {
            guild_id: guild,
            user_id: user,
            channel_id: state.channel_id.map(|c| c.get()),
            is_him,
            session_id: if is_him { state.session_id.clone() } else { String::new() },
            at_ms: now_ms(),
            display_name: state
                .member
                .as_ref()
                .map(|m| m.nick.clone().or_else(|| m.user.global_name.clone()).unwrap_or_else(|| m.user.name.clone()))
                .unwrap_or_default(),
        };
        if let Err(e) = self.bus().publish(&Subject::VoiceMember { guild, user }, &member, None).await {
            tracing::warn!(error = %e, guild, user, "voice state not forwarded");
        }
    }

    /// Forwards a voice server update of an admitted guild (a null endpoint included: the voice
    /// side waits for the next one).
    pub(crate) async fn voice_server(&self, update: &VoiceServerUpdate) {
        let guild = update.guild_id.get();
        if !self.admitted(guild) {
            return;
        }
        let server = v1::VoiceServer { guild_id: guild, endpoint: update.endpoint.clone(), token: update.token.clone(), at_ms: now_ms() };
        if let Err(e) = self.bus().publish(&Subject::VoiceServer { guild }, &server, None).await {
            tracing::warn!(error = %e, guild, "voice server update not forwarded");
        }
    }

    /// Sends op 4 for each join or leave command. Every gateway replica shares the consumer, so
    /// one of them sends each; a command that arrives before the shard is up waits for it.
    pub(crate) async fn run_voice_commands(&self) -> Result<(), GatewayError> {
        let spec = ConsumerSpec::durable("gateway-voice-commands", Family::VoiceCommand).with_ack_wait(Duration::from_secs(10));
        let mut consumer = self.bus().consumer::<v1::VoiceCommand>(spec).await?;
        loop {
            let d = consumer.next().await?;
            let command = &d.event;
            let (Some(guild), channel) = (Id::new_checked(command.guild_id), command.channel_id.and_then(Id::new_checked)) else {
                let _ = d.term().await;
                continue;
            };
            // The owner's join goes to the voice floor's keeper, which checks CLANKIE_VOICE_ROOMS
            // and asks for op 4 itself: an unlisted channel must never be joined. Leaving is
            // always allowed, so his leave goes out at once.
            if command.reason == clankie_proto::OWNER_VOICE_REASON && command.channel_id.is_some() {
                let _ = d.ack().await;
                continue;
            }
            if !self.admitted(command.guild_id) {
                tracing::warn!(guild = command.guild_id, "voice command for a guild not admitted; dropped");
                let _ = d.term().await;
                continue;
            }
            // Op 4 goes out on the guild's shard; a replica not running it leaves the command to one that does.
            let total = self.shard_total().load(std::sync::atomic::Ordering::SeqCst).max(1);
            let shard = ((command.guild_id >> 22) % u64::from(total)) as u32;
            let sender = self.shard_senders().read().unwrap_or_else(|p| p.into_inner()).get(&shard).cloned();
            let sent = match sender {
                Some(sender) => sender.command(&UpdateVoiceState::new(guild, channel, false, false)).is_ok(),
                None => false,
            };
            if sent {
                tracing::info!(guild = command.guild_id, join = channel.is_some(), reason = %command.reason, "op 4 sent");
                let _ = d.ack().await;
            } else {
                // The shard is not up yet, is reconnecting, or runs on another replica: ask again shortly.
                let _ = d.nak_after(Duration::from_millis(500)).await;
            }
        }
    }

    /// Keeps every guild's live voice session as the voice side announces it, so ingest routes
    /// a line typed in the live room's chat to the room.
    pub(crate) async fn run_voice_sessions(&self) -> Result<(), GatewayError> {
        // Every gateway replica needs every guild's current session, so each reads the stream from
        // the last message per guild with a consumer of its own, named by its replica id and
        // made afresh at start (a restart must read the current sessions again, not resume).
        let name = format!("gateway-voice-{}", self.config().replica);
        let mut spec = ConsumerSpec::durable(name, Family::VoiceSession).last_per_subject().fresh();
        spec.ack_wait = Duration::from_secs(30);
        let mut consumer = self.bus().consumer::<v1::VoiceSession>(spec).await?;
        loop {
            let d = consumer.next().await?;
            {
                let mut voice = self.voice_sessions().write().unwrap_or_else(|p| p.into_inner());
                match d.event.channel_id {
                    Some(_) => voice.insert(d.event.guild_id, d.event.clone()),
                    None => voice.remove(&d.event.guild_id),
                };
            }
            let _ = d.ack().await;
        }
    }

    /// The live voice channel of a guild, as this gateway knows it: none once the session's
    /// owner stopped vouching for it (it died with the room empty, say).
    pub fn live_voice_channel(&self, guild: u64) -> Option<u64> {
        self.voice_sessions().read().unwrap_or_else(|p| p.into_inner()).get(&guild).and_then(|s| s.live_channel(clankie_bus::now_ms()))
    }
}
