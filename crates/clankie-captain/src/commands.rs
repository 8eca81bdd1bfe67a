//! The owner's controls inside Discord, answered for the gateway that received them
//! (`clankie.rpc.command`): `/clankie status`, `memory`, `voice join|leave`, `quiet`, `usage`, and
//! `forget-me`, which anyone may run for themselves (as `remind`, `reminders` and `timezone`,
//! answered in `crate::remind_commands`); and the Approve / Reject buttons of a
//! memory proposal, which work once and only for their lifetime. The owner and operators are
//! known by id; anyone else is refused, and every answer leaves a content-free receipt.

use clankie_bus::now_ms;
use clankie_proto::{LaneKey, Subject, v1};
use clankie_store::MemoryStatus;
use prost::Message as _;

use crate::Captain;

/// Discord's limit on a message's content: no command answer is longer, or its edit fails and
/// the person stays on "thinking…".
pub const ANSWER_MAX_CHARS: usize = 2000;

/// Proposals `/clankie memory` lists at most: Discord shows five rows of buttons.
const LISTED_PROPOSALS: i64 = 5;

/// The custom id of a memory button: what it does, to which proposal, until when.
pub fn memory_button(decision: &str, memory: i64, expires_ms: i64) -> String {
    format!("memory:{decision}:{memory}:{expires_ms}")
}

/// The Approve and Reject buttons of one proposal.
pub fn memory_buttons(memory: i64, expires_ms: i64) -> Vec<v1::CommandButton> {
    vec![
        v1::CommandButton { custom_id: memory_button("approve", memory, expires_ms), label: format!("Approve #{memory}"), danger: false },
        v1::CommandButton { custom_id: memory_button("reject", memory, expires_ms), label: format!("Reject #{memory}"), danger: true },
    ]
}

/// A memory button's decision, proposal and expiry; `None` for any other custom id.
fn parse_memory_button(custom_id: &str) -> Option<(&str, i64, i64)> {
    let mut parts = custom_id.split(':');
    let (Some("memory"), Some(decision), Some(id), Some(expires), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some((decision, id.parse().ok()?, expires.parse().ok()?))
}

/// The answer to a button press on a list (memory proposals, reminders): the pressed message
/// again with only the line starting `line_of` changed (`note` after it) and only the buttons
/// `keep` allows, so the other items on it stay decidable. A press whose message came without
/// its words gets `item` and the note alone.
pub(crate) fn pressed(
    req: &v1::CommandRequest,
    (line_of, item): (&str, &str),
    note: &str,
    code: &str,
    keep: impl Fn(&v1::CommandButton) -> bool,
) -> v1::CommandReply {
    if !req.message_text.lines().any(|l| l.starts_with(line_of)) {
        return v1::CommandReply { text: format!("{item}: {note}."), code: code.to_owned(), ..Default::default() };
    }
    let text = req
        .message_text
        .lines()
        .map(|l| if l.starts_with(line_of) { format!("{l} — {note}") } else { l.to_owned() })
        .collect::<Vec<_>>()
        .join("\n");
    let buttons = req.message_buttons.iter().filter(|b| keep(b)).cloned().collect();
    v1::CommandReply { text, buttons, code: code.to_owned(), more: false }
}

pub(crate) fn refused(code: &str, text: &str) -> v1::CommandReply {
    v1::CommandReply { text: text.to_owned(), code: code.to_owned(), ..Default::default() }
}

pub(crate) fn store_unavailable() -> v1::CommandReply {
    refused("store_unavailable", "I can't reach my memory right now; try again in a moment.")
}

pub(crate) fn said(text: String) -> v1::CommandReply {
    v1::CommandReply { text, ..Default::default() }
}

impl Captain {
    pub(crate) async fn answer_command(&self, msg: async_nats::Message) {
        let reply = match v1::CommandRequest::decode(msg.payload.clone()) {
            Ok(req) => {
                let span = tracing::info_span!("interaction", interaction_id = %req.interaction_id);
                let reply = tracing::Instrument::instrument(self.command(&req), span).await;
                let lane = lane_of(&req);
                self.receipt("captain.command", &req.interaction_id, &lane, |r| {
                    let r = r.with_code(command_code(&req.command)).with_id("user", req.user_id);
                    r.with_code(clankie_proto::command_reply_code(&reply.code))
                })
                .await;
                reply
            }
            Err(_) => refused("request_undecodable", "That request could not be read."),
        };
        let reply = within_discords_limit(reply);
        if let Err(e) = self.inner.bus.respond(&msg, &reply).await {
            tracing::warn!(error = %e, "command reply not sent");
        }
    }

    async fn command(&self, req: &v1::CommandRequest) -> v1::CommandReply {
        let store = &self.inner.store;
        if req.command == "forget-me" {
            return self.forget_me(req).await;
        }
        // Anyone's own reminders and time zone: `crate::remind_commands`.
        if let Some(reply) = self.reminder_command(req).await {
            return reply;
        }
        let settings = match store.owner_settings().await {
            Ok(s) => s,
            Err(_) => return store_unavailable(),
        };
        if settings.owner_id != Some(req.user_id) && !settings.operators.contains(&req.user_id) {
            return refused("not_owner", "Only my owner and operators can do that. Anyone can use `/clankie forget-me`.");
        }
        match req.command.as_str() {
            "status" => self.status(req.guild_id).await,
            "memory" => self.memory_list().await,
            "voice join" => self.voice(req, true).await,
            "voice leave" => self.voice(req, false).await,
            "quiet" => self.quiet(req).await,
            "usage" => self.usage(req.days).await,
            "button" => self.button(req).await,
            _ => refused("unknown_command", "I don't know that command."),
        }
    }

    async fn status(&self, guild: Option<u64>) -> v1::CommandReply {
        let store = &self.inner.store;
        let (present, quiet) = match (store.present_lanes(self.inner.config.exchange_window).await, store.quiet_lanes().await) {
            (Ok(p), Ok(q)) => (p, q),
            _ => return store_unavailable(),
        };
        let running = match store.running_lanes().await {
            Ok(r) => r,
            Err(_) => return store_unavailable(),
        };
        let mut voice = None;
        if let Some(guild) = guild {
            let session = self.inner.bus.last::<v1::VoiceSession>(&Subject::VoiceSession { guild }).await.ok().flatten();
            voice = Some(match session.and_then(|s| s.live_channel(now_ms())) {
                Some(c) => format!("Voice: in voice channel {c}."),
                None => "Voice: in no voice channel here.".to_owned(),
            });
        }
        let quiet = quiet.into_iter().map(|(lane, until)| format!("Quiet in {lane} until <t:{}:t>.", until / 1000)).collect();
        said(status_text(running, present, voice, quiet, ANSWER_MAX_CHARS))
    }

    async fn memory_list(&self) -> v1::CommandReply {
        let proposals = match self.inner.store.memories(MemoryStatus::Proposed, LISTED_PROPOSALS).await {
            Ok(p) => p,
            Err(_) => return store_unavailable(),
        };
        if proposals.is_empty() {
            return said("No memory is waiting for a decision.".into());
        }
        let expires = now_ms() + self.inner.config.button_lifetime.as_millis() as i64;
        let text = proposals.iter().map(|m| format!("#{} {}", m.id, m.fact)).collect::<Vec<_>>().join("\n");
        let buttons = proposals.iter().flat_map(|m| memory_buttons(m.id, expires)).collect();
        v1::CommandReply { text: format!("Waiting for a decision:\n{text}"), buttons, ..Default::default() }
    }

    async fn button(&self, req: &v1::CommandRequest) -> v1::CommandReply {
        let Some((decision, id, expires)) = parse_memory_button(&req.custom_id) else {
            return refused("unknown_button", "I don't know that button.");
        };
        // The custom id comes back from the client: its expiry is only believed up to the
        // lifetime counted from the message's own snowflake time.
        let item = (format!("#{id} "), format!("Memory #{id}"));
        let made_ms = (req.message_id != 0).then(|| clankie_proto::time::snowflake_ms(req.message_id));
        let expires = made_ms.map_or(expires, |m| expires.min(m + self.inner.config.button_lifetime.as_millis() as i64));
        if now_ms() > expires {
            let note = "this button has expired; use `/clankie memory` for fresh ones";
            return pressed(req, (&item.0, &item.1), note, "expired", |b| {
                parse_memory_button(&b.custom_id).is_some_and(|(_, _, e)| e >= now_ms())
            });
        }
        let to = match decision {
            "approve" => MemoryStatus::Approved,
            "reject" => MemoryStatus::Rejected,
            _ => return refused("unknown_button", "I don't know that button."),
        };
        let theirs = |b: &v1::CommandButton| parse_memory_button(&b.custom_id).is_none_or(|(_, other, _)| other != id);
        match self.inner.store.decide_memory(id, MemoryStatus::Proposed, to).await {
            Ok(true) => pressed(req, (&item.0, &item.1), if to == MemoryStatus::Approved { "approved" } else { "rejected" }, "", theirs),
            Ok(false) => pressed(req, (&item.0, &item.1), "already decided; nothing changed", "already_decided", theirs),
            Err(_) => store_unavailable(),
        }
    }

    async fn voice(&self, req: &v1::CommandRequest, join: bool) -> v1::CommandReply {
        let Some(guild) = req.guild_id else { return refused("not_in_guild", "Voice needs a server: run this in one.") };
        let channel = if join {
            match req.custom_id.trim().parse::<u64>() {
                Ok(c) => Some(c),
                Err(_) => return refused("bad_channel", "Give the voice channel's id."),
            }
        } else {
            None
        };
        let command = v1::VoiceCommand {
            guild_id: guild,
            channel_id: channel,
            reason: clankie_proto::OWNER_VOICE_REASON.into(),
            epoch: 0,
            at_ms: now_ms(),
        };
        match self.inner.bus.publish(&Subject::VoiceCommand { guild }, &command, None).await {
            Ok(_) => said(match channel {
                Some(c) => format!("Joining voice channel {c}."),
                None => "Leaving voice here.".into(),
            }),
            Err(_) => refused("bus_unavailable", "I can't reach the voice floor right now; try again in a moment."),
        }
    }

    async fn quiet(&self, req: &v1::CommandRequest) -> v1::CommandReply {
        if !(0..=1440).contains(&req.minutes) {
            return refused("bad_minutes", "Between 0 (speak again) and 1440 minutes.");
        }
        let for_ms = req.minutes.saturating_mul(self.inner.config.quiet_minute.as_millis() as i64);
        match self.inner.store.set_quiet(&lane_of(req), for_ms).await {
            Ok(0) => said("I'll answer here again.".into()),
            Ok(until) => said(format!("Quiet here until <t:{}:t>: I'll answer nobody in this channel till then.", until / 1000)),
            Err(_) => store_unavailable(),
        }
    }

    /// The bill of the last `days` UTC days (a week when 0), in the same words as the console's
    /// and `clankie usage`'s, cut to Discord's limit.
    async fn usage(&self, days: i64) -> v1::CommandReply {
        use clankie_console::usage::{DEFAULT_DAYS, MAX_DAYS, text};
        let days = if days == 0 { i64::from(DEFAULT_DAYS) } else { days };
        let Some(days) = u32::try_from(days).ok().filter(|d| (1..=MAX_DAYS).contains(d)) else {
            return refused("bad_days", &format!("Between 1 and {MAX_DAYS} days."));
        };
        match self.inner.store.usage(clankie_store::Since::Days(days)).await {
            Ok(usage) => said(text(&usage.bill(&self.inner.config.prices), ANSWER_MAX_CHARS)),
            Err(_) => store_unavailable(),
        }
    }

    /// Anyone's `/clankie forget-me`: answered at once ("forgetting…"), carried out in the
    /// background (a lane a live run holds is waited for), and the counts edited in over the
    /// first answer. One forget per person at a time: asking again meanwhile is told so and
    /// scans nothing.
    async fn forget_me(&self, req: &v1::CommandRequest) -> v1::CommandReply {
        let store = &self.inner.store;
        let run = match clankie_self::rewrite::begin(store, req.user_id).await {
            Ok(run) => run,
            Err(clankie_self::rewrite::ForgetError::Running) => {
                return refused(
                    "forget_running",
                    "I'm already forgetting you: the first answer will show what was removed once it's done.",
                );
            }
            Err(_) => return store_unavailable(),
        };
        let captain = self.clone();
        let (user, interaction, lane) = (req.user_id, req.interaction_id.clone(), lane_of(req));
        let span = tracing::info_span!("forget", interaction_id = %interaction);
        let work = async move {
            let forgotten = run.run(&captain.inner.store, FORGET_WAIT_PER_LANE, |_| {}).await;
            // The streams keep what was said for days after it was handled: theirs goes too, and
            // his replies to turns only they started.
            let erased = match &forgotten {
                Ok(f) => clankie_self::rewrite::erase_from_streams(&captain.inner.store, &captain.inner.bus, user, f).await,
                Err(_) => {
                    let who = clankie_bus::Erasure { author_id: user, forgotten_at_ms: clankie_bus::now_ms(), answered: &[], names: &[] };
                    captain.inner.bus.erase_author(who).await
                }
            };
            if let Err(e) = &erased {
                tracing::warn!(error = %e, "a forget could not erase the person's messages from the streams");
            }
            // Their reminders go: rows, time zone and every schedule.
            let reminders = match captain.forget_reminders(user).await {
                Ok(n) => n as i64,
                Err(e) => {
                    tracing::warn!(error = %e, "a forget could not remove the person's reminders");
                    -1
                }
            };
            // Their attachments, named by the messages just erased, leave the media root.
            let media = forget_media(&captain.inner.bus, &erased).await;
            if let Err(e) = &media {
                tracing::warn!(error = %e, "a forget could not drop the person's attachments from media");
            }
            let done = forget_answer(&forgotten, &erased, &media);
            captain
                .receipt("captain.forget", &interaction, &lane, |r| {
                    forget_receipt(
                        r.with_id("user", user).with_code(clankie_proto::command_reply_code(&done.code)).with_count("reminders", reminders),
                        &forgotten,
                        &erased,
                        &media,
                    )
                })
                .await;
            match interaction.parse::<u64>() {
                Ok(id) => {
                    if let Err(e) = captain.inner.bus.answer_later(&Subject::RpcCommandDone { interaction: id }, &done).await {
                        tracing::warn!(error = %e, "a forget's counts could not be sent to the gateway");
                    }
                }
                Err(_) => tracing::warn!("a forget's interaction id is not a snowflake; its counts are in its receipt only"),
            }
        };
        tokio::spawn(tracing::Instrument::instrument(work, span));
        v1::CommandReply {
            text: "Forgetting you now: every room and memory that holds your words. I'll edit this with what was removed.".into(),
            more: true,
            ..Default::default()
        }
    }
}

/// What a forget erased from the streams, the store's count, or why it could not.
type Erased = Result<clankie_bus::ErasedMessages, clankie_bus::BusError>;
/// What media dropped of a forgotten person's attachments, or why it could not.
type MediaDropped = Result<v1::MediaForgetReply, String>;

/// Asks media to drop the attachments the erased messages carried.
async fn forget_media(bus: &clankie_bus::Bus, erased: &Erased) -> MediaDropped {
    match erased {
        Ok(b) if !b.attachments.is_empty() => {
            let ask = v1::MediaForgetRequest { attachment_ids: b.attachments.clone() };
            match bus.request::<_, v1::MediaForgetReply>(&Subject::RpcMediaForget, &ask, MEDIA_FORGET_WITHIN).await {
                Ok(reply) if reply.error.is_empty() => Ok(reply),
                Ok(reply) => Err(reply.error),
                Err(e) => Err(e.to_string()),
            }
        }
        _ => Ok(v1::MediaForgetReply::default()),
    }
}

/// The answer edited over "forgetting…": the counts, or what to run again and why.
fn forget_answer(
    forgotten: &Result<clankie_self::rewrite::Forgotten, clankie_self::rewrite::ForgetError>,
    erased: &Erased,
    media: &MediaDropped,
) -> v1::CommandReply {
    match (&forgotten, &erased) {
        (Ok(f), _) if f.lanes_busy > 0 => refused("lanes_busy", "Some rooms stayed busy; run it again in a minute to finish."),
        (Ok(_), Err(_)) => refused(
            "bus_unavailable",
            "Your stored words are gone, but I couldn't reach the message bus; run it again in a minute to finish.",
        ),
        (Ok(_), Ok(_)) if media.is_err() => refused(
            "media_unavailable",
            "Your words are gone, but I couldn't reach media to drop your attachments; run it again in a minute to finish.",
        ),
        (Ok(f), Ok(b)) => said(format!(
            "Done: I no longer hold your words ({} message(s) and lines in {} conversation(s); {} memory fact(s); {} event(s) erased from the message bus).",
            f.messages,
            f.lanes,
            f.memories,
            b.total()
        )),
        (Err(_), _) => store_unavailable(),
    }
}

/// The forget's receipt: what each part removed, in counts.
fn forget_receipt(
    r: v1::Receipt,
    forgotten: &Result<clankie_self::rewrite::Forgotten, clankie_self::rewrite::ForgetError>,
    erased: &Erased,
    media: &MediaDropped,
) -> v1::Receipt {
    let r = match forgotten {
        Ok(f) => r
            .with_count("lanes", f.lanes as i64)
            .with_count("messages", f.messages as i64)
            .with_count("blocks", f.blocks as i64)
            .with_count("answers", f.answers as i64)
            .with_count("answers_kept", f.answers_kept as i64)
            .with_count("summaries", f.summaries as i64)
            .with_count("memories", f.memories as i64)
            .with_count("experiences", f.experiences as i64)
            .with_count("ring_lines", f.ring_lines as i64)
            .with_count("unsent_replies", f.unsent_replies as i64)
            .with_count("lanes_busy", f.lanes_busy as i64),
        Err(_) => r,
    };
    let erased = erased.as_ref().map(|b| b.by_stream.clone()).unwrap_or_default();
    let mut r = match media {
        Ok(m) => r.with_count("attachments", m.attachments as i64).with_count("attachment_files", m.files as i64),
        Err(_) => r,
    };
    for (stream, n) in erased {
        r.counts.insert(format!("erased_{}", stream.to_lowercase()), n as i64);
    }
    r
}

/// How long a forget waits for media to drop the person's attachments.
const MEDIA_FORGET_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a forget waits for a live run to let go of each lane it must rewrite.
const FORGET_WAIT_PER_LANE: std::time::Duration = std::time::Duration::from_secs(120);

/// Where a memory proposal is put to the owner: in a DM with Approve and Reject buttons, an
/// outbox row that commits with the turn that proposed it. Keeps the rows it built, to be
/// relayed once that commit is made.
pub struct OwnerAsk {
    pub owner: u64,
    pub thread: LaneKey,
    pub turn_id: String,
    pub button_lifetime: std::time::Duration,
    asked: std::sync::Mutex<Vec<clankie_store::OutboxRow>>,
}

impl OwnerAsk {
    /// Asks `owner` about proposals made in `thread` by turn `turn_id`.
    pub fn new(owner: u64, thread: LaneKey, turn_id: String, button_lifetime: std::time::Duration) -> OwnerAsk {
        OwnerAsk { owner, thread, turn_id, button_lifetime, asked: Default::default() }
    }

    /// The DMs built so far, in order.
    pub fn asked(self) -> Vec<clankie_store::OutboxRow> {
        self.asked.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

impl clankie_store::AskOwner for OwnerAsk {
    /// The DM about proposal `memory`; its id (`memory:<id>`) is also its nonce, so it posts once.
    fn row(&self, memory: i64, fact: &str) -> clankie_store::OutboxRow {
        let expires = now_ms() + self.button_lifetime.as_millis() as i64;
        let out = v1::OutboundMessage {
            idempotency_key: format!("memory:{memory}"),
            kind: v1::OutboundKind::Direct as i32,
            text: format!("I'd like to remember this (proposed in {}):\n#{memory} {fact}", self.thread),
            delivery_id: format!("memory:{memory}"),
            direct_user_id: self.owner,
            buttons: memory_buttons(memory, expires),
            ..Default::default()
        };
        let row = crate::outbox::Outbox::post(&self.turn_id, &out);
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).push(row.clone());
        row
    }
}

/// Any answer cut to [`ANSWER_MAX_CHARS`]: the lists that can say "and N more" already did
/// (`status_text`); what is still too long (a long memory fact) ends in "…".
fn within_discords_limit(mut reply: v1::CommandReply) -> v1::CommandReply {
    if reply.text.chars().count() > ANSWER_MAX_CHARS {
        reply.text = reply.text.chars().take(ANSWER_MAX_CHARS - 1).chain(std::iter::once('…')).collect();
    }
    reply
}

/// A list in an answer: shown whole when it fits, else its first items and "and N more".
struct Listing {
    head: &'static str,
    items: Vec<String>,
    sep: &'static str,
    shown: usize,
}

impl Listing {
    fn new(head: &'static str, items: Vec<String>, sep: &'static str) -> Listing {
        let shown = items.len();
        Listing { head, items, sep, shown }
    }

    fn render(&self) -> String {
        let shown = self.items[..self.shown].join(self.sep);
        match self.items.len() - self.shown {
            0 => format!("{}{shown}", self.head),
            more if self.shown == 0 => format!("{}{more} in all.", self.head),
            more => format!("{}{shown}{}and {more} more.", self.head, if self.sep == "\n" { "\n…" } else { " " }),
        }
    }
}

/// The status answer within `max` characters: while it is too long, the longest list gives up
/// items first (the running lanes, the conversations, the quiet rooms), each saying how many
/// more it holds.
fn status_text(running: Vec<String>, present: Vec<String>, voice: Option<String>, quiet: Vec<String>, max: usize) -> String {
    let running = if running.is_empty() {
        Listing::new("Running: nothing right now.", vec![], "")
    } else {
        let n = running.len();
        let mut l = Listing::new("Running: ", running, ", ");
        l.items[n - 1].push('.');
        l
    };
    let mut present = Listing::new("In conversation: ", present, ", ");
    if let Some(last) = present.items.last_mut() {
        last.push('.');
    }
    let mut lists = [running, present, Listing::new("", quiet, "\n")];
    let render = |lists: &[Listing; 3]| {
        let mut lines = vec![lists[0].render()];
        if !lists[1].items.is_empty() {
            lines.push(lists[1].render());
        }
        lines.extend(voice.clone());
        if !lists[2].items.is_empty() {
            lines.push(lists[2].render());
        }
        lines.join("\n")
    };
    loop {
        let text = render(&lists);
        if text.chars().count() <= max {
            return text;
        }
        let Some(longest) = lists.iter_mut().filter(|l| l.shown > 0).max_by_key(|l| l.render().chars().count()) else {
            return text.chars().take(max).collect();
        };
        // One item at a time, from whichever list is longest now, so the lists end about even.
        longest.shown -= 1;
    }
}

/// The lane a command concerns: where it was run.
fn lane_of(req: &v1::CommandRequest) -> LaneKey {
    crate::lane_at(req.guild_id, req.channel_id)
}

/// The receipt code of a command: its name, never its options.
fn command_code(command: &str) -> &'static str {
    match command {
        "status" => "status",
        "memory" => "memory",
        "voice join" => "voice_join",
        "voice leave" => "voice_leave",
        "quiet" => "quiet",
        "usage" => "usage",
        "forget-me" => "forget_me",
        "remind" => "remind",
        "reminders" => "reminders",
        "timezone" => "timezone",
        "button" => "button",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes(n: usize, guild: u64) -> Vec<String> {
        (0..n).map(|i| format!("room:{guild}:{}", 1_300_000_000_000_000_000u64 + i as u64)).collect()
    }

    #[test]
    fn slash_status_with_200_lanes_answers_within_discords_limit_and_says_how_many_more() {
        let quiet: Vec<String> = lanes(200, 7).into_iter().map(|l| format!("Quiet in {l} until <t:1764000000:t>.")).collect();
        let voice = Some("Voice: in voice channel 300.".to_owned());
        let text = status_text(lanes(200, 100), lanes(200, 101), voice, quiet, ANSWER_MAX_CHARS);
        assert!(text.chars().count() <= ANSWER_MAX_CHARS, "{} chars", text.chars().count());
        assert!(text.starts_with("Running: room:100:"), "{text}");
        assert!(text.contains("Voice: in voice channel 300."), "{text}");
        let more: Vec<usize> = text.split("and ").skip(1).filter_map(|t| t.split(' ').next()?.parse().ok()).collect();
        assert_eq!(more.len(), 3, "each list says how many it left out: {text}");
        let shown = text.matches("room:").count();
        assert_eq!(shown + more.iter().sum::<usize>(), 600, "every lane is shown or counted");
        assert!(shown >= 40, "the answer still shows what fits: {shown}");
    }

    #[test]
    fn status_that_fits_is_shown_whole() {
        let text = status_text(lanes(2, 100), vec![], None, vec!["Quiet in room:1:2 until <t:5:t>.".into()], ANSWER_MAX_CHARS);
        assert_eq!(text, "Running: room:100:1300000000000000000, room:100:1300000000000000001.\nQuiet in room:1:2 until <t:5:t>.");
        assert_eq!(status_text(vec![], vec![], None, vec![], ANSWER_MAX_CHARS), "Running: nothing right now.");
    }

    #[test]
    fn a_long_answer_is_cut_to_discords_limit() {
        let reply = within_discords_limit(said("x".repeat(5000)));
        assert_eq!(reply.text.chars().count(), ANSWER_MAX_CHARS);
        assert!(reply.text.ends_with('…'));
    }
}
