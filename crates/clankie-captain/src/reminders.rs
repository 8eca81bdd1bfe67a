//! Reminders: set (from the `remind` tool or `/clankie remind`), bounded, cancelled and
//! forgotten here; fired by nats-server itself (`Bus::schedule`). A firing becomes an ingress
//! delivery of its own kind, `reminder:<firing key>`, published on its lane's ingress subject
//! with that id as its `Nats-Msg-Id`: from there the path every message takes (admission keyed
//! by delivery id, the lane's lease and fencing, the outbox's one post per turn) carries it, so
//! a firing taken twice, by two captains or after a crash, is still one delivery and one post.

use std::time::{Duration, SystemTime};

use clankie_bus::{BusError, Delivery, MsgId, Schedule};
use clankie_proto::{Subject, v1};
use clankie_store::{Added, StoredReminder};

use crate::when::{self, WhenError};
use crate::{Captain, lane_at};

/// The longest reminder text taken.
pub const MAX_REMINDER_CHARS: usize = 300;

/// What someone asked to be reminded of.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ask {
    /// The reminder's id: the same for the same ask (a retried turn or command defines it again,
    /// not twice).
    pub id: u64,
    pub asker_id: u64,
    pub asker_name: String,
    /// Where it was asked, and so where it posts (unless `direct`).
    pub guild_id: Option<u64>,
    pub channel_id: u64,
    pub text: String,
    /// When, as the person wrote it, for a one-off.
    pub when: String,
    /// A repeating check-in's cron expression (the caller checked the asker may set one).
    pub cron: String,
    pub direct: bool,
    pub delivery_id: String,
}

/// A reminder set: the line that tells the person when it will come.
#[derive(Debug, Clone)]
pub(crate) struct Set {
    pub line: String,
}

/// Why a reminder was not set; its text is the line the person is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("Say what to remind you of.")]
    Empty,
    #[error("A reminder is at most {MAX_REMINDER_CHARS} characters.")]
    TooLong,
    #[error("{0}")]
    When(WhenError),
    #[error("That is more than {0} days ahead; I only take reminders within that.")]
    BeyondHorizon(u64),
    #[error("You have {0} reminders waiting already, the most I keep for one person. Cancel one with `/clankie reminders` first.")]
    PersonFull(i64),
    #[error("This room has {0} reminders waiting already, the most I keep for one room.")]
    RoomFull(i64),
    #[error("You can't write in this channel, so I won't post a reminder of yours here. Ask where you can write, or with `dm`.")]
    CannotWrite,
    #[error("I don't know the time zone \"{0}\". Use an IANA name such as Europe/Berlin or America/New_York.")]
    BadZone(String),
    #[error("That repeating schedule was refused: {0}. Write cron with seconds first, such as `0 0 19 * * FRI`.")]
    BadCron(String),
    #[error("I can't keep reminders right now; try again in a moment.")]
    Unavailable,
}

impl Refused {
    /// The short code receipts and the command's reply carry.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Refused::Empty => "reminder_empty",
            Refused::TooLong => "reminder_too_long",
            Refused::When(WhenError::Unreadable) => "reminder_time_unreadable",
            Refused::When(WhenError::Past(_)) => "reminder_in_past",
            Refused::BeyondHorizon(_) => "reminder_beyond_horizon",
            Refused::PersonFull(_) => "reminder_person_limit",
            Refused::RoomFull(_) => "reminder_room_limit",
            Refused::CannotWrite => "reminder_cannot_write",
            Refused::BadZone(_) => "time_zone_unknown",
            Refused::BadCron(_) => "reminder_schedule_refused",
            Refused::Unavailable => "store_unavailable",
        }
    }
}

/// A stable 63-bit id for an ask, from what names it (FNV-1a): the same words asked in the
/// same message give the same reminder however often the turn runs.
pub(crate) fn reminder_id(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0x1f)) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    (hash & (i64::MAX as u64)).max(1)
}

impl Captain {
    /// The zone `user`'s reminders are read in, and its name: theirs, else the deployment's.
    pub(crate) async fn zone_of(&self, user: u64) -> Result<(jiff::tz::TimeZone, String), Refused> {
        let set = self.inner.store.time_zone(user).await.map_err(|_| Refused::Unavailable)?;
        let name = set.unwrap_or_else(|| self.inner.config.time_zone.clone());
        let name = if name.trim().is_empty() { "UTC".to_owned() } else { name.trim().to_owned() };
        let zone = when::zone(&name).ok_or_else(|| Refused::BadZone(name.clone()))?;
        Ok((zone, name))
    }

    /// Whether `user` may set a repeating check-in: the owner and operators.
    pub(crate) async fn may_repeat(&self, user: u64) -> bool {
        matches!(self.inner.store.owner_settings().await, Ok(s) if s.owner_id == Some(user) || s.operators.contains(&user))
    }

    /// Sets a reminder: checked (words, time, horizon, the asker's and the room's limits),
    /// stored, then defined on the bus, where nats-server fires it.
    pub(crate) async fn set_reminder(&self, ask: Ask) -> Result<Set, Refused> {
        let text = ask.text.trim();
        if text.is_empty() {
            return Err(Refused::Empty);
        }
        if text.chars().count() > MAX_REMINDER_CHARS {
            return Err(Refused::TooLong);
        }
        let (zone, zone_name) = self.zone_of(ask.asker_id).await?;
        let now = jiff::Timestamp::now();
        let (schedule, due_at_ms, when_line) = if ask.cron.trim().is_empty() {
            let at = when::resolve(&ask.when, now, &zone).map_err(Refused::When)?;
            let horizon = self.inner.config.bounds.reminder_horizon;
            if at.timestamp().duration_since(now).as_secs() > horizon.as_secs() as i64 {
                return Err(Refused::BeyondHorizon(horizon.as_secs() / 86_400));
            }
            let ms = at.timestamp().as_millisecond();
            let system = SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
            (Schedule::At(system), ms, when::spoken(&at))
        } else {
            let cron = ask.cron.trim().to_owned();
            let line = format!("on `{cron}` ({zone_name}) until it is cancelled");
            (Schedule::Cron { expression: cron, time_zone: Some(zone_name.clone()) }, 0, line)
        };
        let lane = lane_at(ask.guild_id, ask.channel_id);
        let created_at_ms = now.as_millisecond();
        let stored = StoredReminder {
            reminder_id: ask.id,
            lane: lane.to_string(),
            guild_id: ask.guild_id,
            channel_id: ask.channel_id,
            asker_id: ask.asker_id,
            text: text.to_owned(),
            due_at_ms,
            cron: ask.cron.trim().to_owned(),
            time_zone: zone_name.clone(),
            direct: ask.direct,
            created_at_ms,
            delivery_id: ask.delivery_id.clone(),
            ..Default::default()
        };
        let bounds = &self.inner.config.bounds;
        let added = self
            .inner
            .store
            .add_reminder(&stored, i64::from(bounds.reminders_per_person), i64::from(bounds.reminders_per_room))
            .await
            .map_err(|_| Refused::Unavailable)?;
        let line = |id: u64| {
            let place = if ask.direct { "by DM" } else { "here" };
            format!("I'll remind you {when_line}, {place}. (reminder {id})")
        };
        match added {
            Added::PersonFull(n) => return Err(Refused::PersonFull(n)),
            Added::RoomFull(n) => return Err(Refused::RoomFull(n)),
            // Set before by this same ask, and fired or cancelled since: nothing to define again.
            Added::Again if !matches!(self.inner.store.reminder(ask.id).await, Ok(Some(r)) if r.ended.is_none()) => {
                return Ok(Set { line: line(ask.id) });
            }
            Added::New | Added::Again => {}
        }
        let reminder = v1::Reminder {
            reminder_id: ask.id,
            guild_id: ask.guild_id,
            channel_id: ask.channel_id,
            asker_id: ask.asker_id,
            asker_name: ask.asker_name.clone(),
            text: text.to_owned(),
            due_at_ms,
            cron: stored.cron.clone(),
            time_zone: zone_name,
            created_at_ms,
            delivery_id: ask.delivery_id.clone(),
            direct: ask.direct,
        };
        if let Err(e) = self.inner.bus.schedule(ask.id, &schedule, &reminder).await {
            let _ = self.inner.store.cancel_reminder(ask.id).await;
            tracing::warn!(reminder = ask.id, error = %e, "a reminder could not be defined on the bus");
            return Err(match e {
                BusError::ScheduleInPast { .. } => Refused::When(WhenError::Past(when_line)),
                BusError::ScheduleRefused { detail, .. } => Refused::BadCron(detail),
                _ => Refused::Unavailable,
            });
        }
        self.receipt("captain.reminder", &ask.delivery_id, &lane, |r| {
            r.with_code("set")
                .with_id("reminder", ask.id)
                .with_id("user", ask.asker_id)
                .with_flag("repeating", due_at_ms == 0)
                .with_flag("direct", ask.direct)
        })
        .await;
        Ok(Set { line: line(ask.id) })
    }

    /// Cancels reminder `id` for `by`, who must have asked for it unless `any` (the owner).
    /// `Ok(false)` when there was no such pending reminder of theirs.
    pub(crate) async fn cancel_reminder(&self, id: u64, by: u64, any: bool) -> Result<bool, Refused> {
        let store = &self.inner.store;
        let Some(r) = store.reminder(id).await.map_err(|_| Refused::Unavailable)? else { return Ok(false) };
        if r.ended.is_some() || (!any && r.asker_id != by) {
            return Ok(false);
        }
        // The schedule goes first: a row marked cancelled with its schedule still live would fire.
        self.inner.bus.cancel_schedule(id).await.map_err(|_| Refused::Unavailable)?;
        let cancelled = store.cancel_reminder(id).await.map_err(|_| Refused::Unavailable)?;
        let lane = lane_at(r.guild_id, r.channel_id);
        self.receipt("captain.reminder", &r.delivery_id, &lane, |x| x.with_code("cancelled").with_id("reminder", id).with_id("user", by))
            .await;
        Ok(cancelled)
    }

    /// A forget takes the person's reminders with it: their rows and time zone leave the store
    /// and every schedule of theirs is cancelled. Returns how many went.
    pub(crate) async fn forget_reminders(&self, user: u64) -> Result<usize, String> {
        let ids = self.inner.store.forget_reminders(user).await.map_err(|e| e.to_string())?;
        for id in &ids {
            self.inner.bus.cancel_schedule(*id).await.map_err(|e| e.to_string())?;
        }
        Ok(ids.len())
    }

    /// A firing nats-server published: made the ingress delivery `reminder:<firing key>` on its
    /// lane's subject, then noted and acked. One cancelled or forgotten meanwhile posts nothing.
    pub(crate) async fn take_due(&self, d: Delivery<v1::Reminder>) {
        let firing = d.firing();
        let r = &d.event;
        let lane = lane_at(r.guild_id, r.channel_id);
        let delivery_id = format!("reminder:{}", firing.key());
        let stored = match self.inner.store.reminder(firing.reminder).await {
            Ok(stored) => stored,
            Err(e) => {
                tracing::warn!(reminder = firing.reminder, error = %e, "a due reminder's row is unreadable; it will come back");
                let _ = d.nak_after(self.inner.config.backoff(d.delivered)).await;
                return;
            }
        };
        if stored.as_ref().is_none_or(|s| s.ended.as_deref() == Some("cancelled") || s.asker_id != r.asker_id) {
            self.receipt("captain.reminder", &delivery_id, &lane, |x| x.with_code("dropped").with_id("reminder", firing.reminder)).await;
            let _ = d.ack().await;
            return;
        }
        let fired_ms = i64::try_from(firing.fired_ns / 1_000_000).unwrap_or_else(|_| clankie_bus::now_ms());
        let ingress = v1::Ingress {
            delivery_id: delivery_id.clone(),
            guild_id: r.guild_id,
            channel_id: r.channel_id,
            author_id: r.asker_id,
            author_name: r.asker_name.clone(),
            content: r.text.clone(),
            received_at_ms: fired_ms,
            reminder: Some(r.clone()),
            ..Default::default()
        };
        let subject = Subject::ingress_text(r.guild_id, r.channel_id);
        if let Err(e) = self.inner.bus.publish(&subject, &ingress, Some(&MsgId::new(delivery_id.clone()))).await {
            tracing::warn!(reminder = firing.reminder, error = %e, "a due reminder could not be handed to its lane; it will come back");
            let _ = d.nak_after(self.inner.config.backoff(d.delivered)).await;
            return;
        }
        let last = matches!(firing.next, clankie_bus::Next::Done);
        if let Err(e) = self.inner.store.reminder_fired(firing.reminder, fired_ms, last).await {
            tracing::warn!(reminder = firing.reminder, error = %e, "a fired reminder could not be noted; it will come back");
            let _ = d.nak_after(self.inner.config.backoff(d.delivered)).await;
            return;
        }
        self.receipt("captain.reminder", &delivery_id, &lane, |x| {
            x.with_code("fired").with_id("reminder", firing.reminder).with_count("delivered", d.delivered).with_flag("last", last)
        })
        .await;
        let _ = d.ack().await;
    }
}
