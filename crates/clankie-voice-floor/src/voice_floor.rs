//! The voice floor every room of this process shares: its bus, model, shared self and parts,
//! and what the rooms and runs ask of it (the persona, his names, receipts, experiences).

use clankie_agent::Model;
use clankie_bus::{Bus, BusError, ConsumerSpec, now_ms};
use clankie_proto::{Family, LaneKey, ReceiptKind, Subject, v1};
use clankie_self::{SelfSource, Surface, experience};

use crate::config::VoiceConfig;
use crate::floor::FloorRules;
use crate::ring::RingLine;

/// Why the voice floor stopped.
#[derive(Debug, thiserror::Error)]
pub enum VoiceError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("the room is gone")]
    Gone,
}

/// A live room's input consumers, opened by [`VoiceFloor::room_inputs`].
pub struct RoomInputs {
    typed: clankie_bus::Consumer<v1::RoomInput>,
    bodies: clankie_bus::Consumer<v1::RoomInput>,
}

impl RoomInputs {
    /// The next room input, typed or from a body, whichever comes first: a room hears both on
    /// one path.
    pub(crate) async fn next(&mut self) -> Result<clankie_bus::Delivery<v1::RoomInput>, BusError> {
        tokio::select! {
            d = self.typed.next() => d,
            d = self.bodies.next() => d,
        }
    }
}

/// The voice floor. Cheap to share behind an `Arc`.
pub struct VoiceFloor {
    bus: Bus,
    model: Model,
    selfhood: SelfSource,
    config: VoiceConfig,
    /// The supervised parts of this process's rooms (each room's transcriber and rules).
    parts: clankie_http::Parts,
}

/// The tool a voice run hands requests that need action to his text-side self with; the persona
/// names it, and the run answers calls of it.
pub(crate) const ASK: &str = "ask_clankie";

impl VoiceFloor {
    /// A floor over `bus`, answering with `model` as the shared self `selfhood` describes him.
    pub fn new(bus: Bus, model: Model, selfhood: SelfSource, config: VoiceConfig) -> VoiceFloor {
        VoiceFloor { bus, model, selfhood, config, parts: clankie_http::Parts::default() }
    }

    /// The supervised parts of this process's rooms, for its readiness.
    pub fn parts(&self) -> clankie_http::Parts {
        self.parts.clone()
    }

    /// The bus the floor publishes on: each room publishes its own evidence on the same one.
    pub(crate) fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The model every run of this process answers with.
    pub(crate) fn model(&self) -> &Model {
        &self.model
    }

    /// How the floor behaves: rooms read their ring size, dedup window and his name from it.
    pub(crate) fn config(&self) -> &VoiceConfig {
        &self.config
    }

    /// A room's conversation as the store has it (what its owners heard and said), oldest first.
    pub async fn ring(&self, guild: u64, channel: u64) -> Result<Vec<RingLine>, clankie_store::StoreError> {
        let rows = self.selfhood.store().ring(guild, channel, self.config.ring_size as i64).await?;
        Ok(rows.into_iter().map(RingLine::from).collect())
    }

    /// Tells the shared self he joined a voice room.
    pub async fn joined(&self, guild: u64, channel: u64) {
        self.experience(experience::voice_joined(guild, channel, now_ms())).await;
    }

    /// Tells the shared self he left a voice room.
    pub async fn left(&self, guild: u64, channel: u64) {
        self.experience(experience::voice_left(guild, channel, now_ms())).await;
    }

    /// Tells the shared self what he lived, so his other surfaces know it; a bus away loses it
    /// with a warning, never the room.
    pub(crate) async fn experience(&self, lived: v1::Experience) {
        if let Err(e) = experience::publish(&self.bus, &lived).await {
            tracing::warn!(error = %e, "experience not published");
        }
    }

    /// Opens one room's input consumers, typed and from bodies. They are durable and the room's
    /// own, so the next owner goes on where this one stopped; a new one starts at what is
    /// published from now on, so lines from a room's earlier life are never heard late. Open them
    /// before the room is announced live, so nothing routed to it is missed.
    pub async fn room_inputs(&self, guild: u64, channel: u64) -> Result<RoomInputs, VoiceError> {
        let typed_spec = ConsumerSpec::durable(format!("voice-floor-room-{guild}-{channel}"), Family::IngressRoom)
            .with_filter(Subject::IngressRoom { guild, channel }.to_string())
            .deliver_new()
            .fresh();
        // Made afresh by each owner: it hears what is said from its taking of the room on,
        // never a backlog an owner that died left unread.
        let bodies_spec = ConsumerSpec::durable(format!("voice-floor-input-{guild}-{channel}"), Family::VoiceInput)
            .with_filter(Subject::VoiceInput { guild, channel }.to_string())
            .deliver_new()
            .fresh();
        Ok(RoomInputs {
            typed: self.bus.consumer::<v1::RoomInput>(typed_spec).await?,
            bodies: self.bus.consumer::<v1::RoomInput>(bodies_spec).await?,
        })
    }

    /// The floor's rules, with the persona's name and aliases (edited with `clankie self persona`)
    /// added to the configured ones, so a new alias wakes him without a restart.
    pub(crate) async fn rules(&self) -> FloorRules {
        let mut rules = self.config.rules.clone();
        match self.selfhood.store().persona().await {
            Ok(p) => {
                for name in std::iter::once(p.name).chain(p.aliases).map(|n| n.trim().to_owned()) {
                    if !name.is_empty() && !rules.names.iter().any(|n| n.eq_ignore_ascii_case(&name)) {
                        rules.names.push(name);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "persona unavailable; waking on the configured names only"),
        }
        rules
    }

    /// The voice persona: the shared self's prompt for this room (or its bare form when the
    /// store is away), and its self-context, which goes before the room block.
    pub(crate) async fn persona(&self, key: (u64, u64)) -> (String, String) {
        let thread = LaneKey::Voice { guild: key.0, channel: key.1 };
        let snapshot = match self.selfhood.snapshot(&thread).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "shared self unavailable; speaking with the bare persona");
                self.selfhood.bare()
            }
        };
        (clankie_self::assemble(&snapshot, &thread, Surface::Voice { ask_tool: ASK }), clankie_self::self_context(&snapshot, &thread))
    }

    /// Publishes a content-free receipt of one room input: the evidence a run and a room leave
    /// of what they did with it.
    pub(crate) async fn receipt(&self, kind: &'static str, input: &v1::RoomInput, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        let Ok(kind) = ReceiptKind::new(kind) else { return };
        let lane = clankie_proto::LaneKey::Voice { guild: input.guild_id, channel: input.channel_id };
        let receipt = build(
            v1::Receipt::new(&kind, self.bus.service(), &input.delivery_id, now_ms())
                .with_lane(&lane)
                .with_id("guild", input.guild_id)
                .with_id("channel", input.channel_id),
        );
        if let Err(e) = self.bus.publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "receipt not published");
        }
    }
}
