//! Forgetting a person on the bus. The streams keep what was said for days after it was
//! handled (limits retention): a person's messages, typed room lines, steers carrying their
//! messages and their transcribed speech are found by the author id each event carries (never
//! by their words) and erased from their stream by sequence; his replies to turns only they
//! started go from the egress stream by the turn they answered, his spoken answers to voice
//! runs their words began from the voice stream, and the experiences they took part in from
//! the self stream by their id.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use clankie_proto::{Family, v1};
use futures::StreamExt;
use prost::Message as _;

use crate::{Bus, BusError, stream_for};

/// Whom a forget erases from the streams, as the store's forget found them.
#[derive(Debug, Clone, Copy)]
pub struct Erasure<'a> {
    /// The id their events carry.
    pub author_id: u64,
    /// When they were forgotten (ms since the epoch), as the store recorded it: words they
    /// wrote before it are theirs to forget.
    pub forgotten_at_ms: i64,
    /// The turns only they started, whose answers the store withdrew: his replies to them go.
    pub answered: &'a [String],
    /// The names they went by: the experiences they took part in that carry no ids (recorded
    /// before ids were kept) go by these; the others go by `author_id`.
    pub names: &'a [String],
}

/// What forgetting a person erased from the streams.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErasedMessages {
    /// Messages erased, by stream name (a stream with none of theirs is absent).
    pub by_stream: BTreeMap<&'static str, u64>,
    /// The Discord attachment ids their erased messages carried, for media to drop.
    pub attachments: Vec<u64>,
    /// Other people's messages rewritten without their words, by stream name.
    pub rewritten: BTreeMap<&'static str, u64>,
}

impl ErasedMessages {
    /// Messages erased from every stream together.
    pub fn total(&self) -> u64 {
        self.by_stream.values().sum()
    }
}

/// The families whose events carry a person's words, each with the author id it names.
const AUTHORED: [Family; 7] = [
    Family::IngressText,
    Family::IngressRoom,
    Family::LaneSteer,
    Family::VoiceInput,
    Family::VoiceTranscript,
    // A reminder's definition and its firings hold the asker's words.
    Family::ScheduleDef,
    Family::ScheduleDue,
];

/// How long a read of a stream may wait for its next message before it gives up.
const NEXT_WITHIN: Duration = Duration::from_secs(10);

/// Whose event this is, and the attachments it carries; `None` when it does not decode.
fn author_of(family: Family, payload: &[u8]) -> Option<(u64, Vec<u64>)> {
    let ingress = |i: v1::Ingress| (i.author_id, i.attachments.iter().map(|a| a.id).collect());
    match family {
        Family::IngressText => v1::Ingress::decode(payload).ok().map(ingress),
        Family::IngressRoom | Family::VoiceInput => v1::RoomInput::decode(payload).ok().map(|r| (r.author_id, Vec::new())),
        Family::LaneSteer => v1::Steer::decode(payload).ok().and_then(|s| s.ingress).map(ingress),
        Family::VoiceTranscript => v1::Transcript::decode(payload).ok().map(|t| (t.speaker_id, Vec::new())),
        Family::ScheduleDef | Family::ScheduleDue => v1::Reminder::decode(payload).ok().map(|r| (r.asker_id, Vec::new())),
        _ => None,
    }
}

/// Another person's event that carries `author_id`'s words (quoted, or its thread's starter),
/// with those words made into the forgotten marker; `None` when it carries none of theirs.
fn without_carried(family: Family, payload: &[u8], author_id: u64) -> Option<Vec<u8>> {
    let forget = |ingress: &mut v1::Ingress| clankie_proto::words::forget_carried(ingress, |a, _| a == author_id) > 0;
    match family {
        Family::IngressText => {
            let mut ingress = v1::Ingress::decode(payload).ok()?;
            forget(&mut ingress).then(|| ingress.encode_to_vec())
        }
        Family::LaneSteer => {
            let mut steer = v1::Steer::decode(payload).ok()?;
            forget(steer.ingress.as_mut()?).then(|| steer.encode_to_vec())
        }
        _ => None,
    }
}

impl Bus {
    /// Erases every event of `author_id`'s from the streams that keep them (their messages
    /// and edits, typed room lines, steers of their messages, their transcribed speech),
    /// reading each stream once with an ordered consumer and deleting by sequence, with the
    /// server overwriting what it deletes. Events of anyone else stay. His replies on the
    /// egress stream to the turns in `answered` go too: the turns only they started, whose
    /// answers the store has withdrawn (by the turn's delivery id each reply carries); his
    /// spoken answers (`Speak`) to voice runs one of their inputs began; and the experiences on
    /// the self stream they took part in, by id (by one of their `names` for an experience
    /// recorded before ids were kept), as the store's went.
    ///
    /// Other people's events that carry their words (a reply quoting them, a message in a
    /// thread they started) are rewritten: republished on their subject with those words made
    /// into the forgotten marker, and the original erased. A consumer takes the copy as one
    /// more delivery of the same message, which it already handles (settled: acked; held: the
    /// original answers for it).
    ///
    /// It records the forget in the audience bucket ([`Bus::record_forgotten`]) before the
    /// streams are read: every live voice room drops their lines from the ring it holds in
    /// memory, the gateways stop carrying their old words, and a process away meanwhile learns
    /// it when it watches again.
    pub async fn erase_author(&self, who: Erasure<'_>) -> Result<ErasedMessages, BusError> {
        let author_id = who.author_id;
        self.record_forgotten(author_id, who.forgotten_at_ms).await?;
        let mut erased = ErasedMessages::default();
        let answered: BTreeSet<&str> = who.answered.iter().map(String::as_str).collect();
        // The voice inputs of theirs found below: his spoken answer to a run one of them began goes too.
        let mut began: BTreeSet<String> = BTreeSet::new();
        let families = AUTHORED
            .into_iter()
            .chain((!answered.is_empty()).then_some(Family::BodySend))
            .chain([Family::VoiceSpeak, Family::SelfExperience]);
        for family in families {
            let Some(spec) = stream_for(family) else { continue };
            let fail = |detail: String| BusError::Stream { stream: spec.name, detail };
            let mut found = Vec::new();
            let mut rewritten: Vec<(u64, String, Vec<u8>)> = Vec::new();
            self.read_family_on(family, |sequence, subject, payload| {
                let theirs = match family {
                    Family::BodySend => {
                        v1::OutboundMessage::decode(payload).ok().filter(|m| answered.contains(m.delivery_id.as_str())).map(|_| Vec::new())
                    }
                    Family::VoiceSpeak => v1::Speak::decode(payload)
                        .ok()
                        .filter(|x| began.contains(&x.delivery_id) || answered.contains(x.delivery_id.as_str()))
                        .map(|_| Vec::new()),
                    Family::SelfExperience => v1::Experience::decode(payload)
                        .ok()
                        .filter(|x| {
                            x.participant_ids.contains(&author_id)
                                || (x.participant_ids.is_empty() && x.participants.iter().any(|p| who.names.contains(p)))
                        })
                        .map(|_| Vec::new()),
                    _ => author_of(family, payload).filter(|(author, _)| *author == author_id).map(|(_, attachments)| attachments),
                };
                if let Some(attachments) = theirs {
                    if matches!(family, Family::IngressRoom | Family::VoiceInput)
                        && let Ok(input) = v1::RoomInput::decode(payload)
                    {
                        began.insert(input.delivery_id);
                    }
                    found.push(sequence);
                    erased.attachments.extend(attachments);
                } else if let Some(copy) = without_carried(family, payload, author_id) {
                    rewritten.push((sequence, subject.to_owned(), copy));
                }
            })
            .await?;
            if found.is_empty() && rewritten.is_empty() {
                continue;
            }
            let stream = self.js.get_stream(spec.name).await.map_err(|e| fail(e.to_string()))?;
            for (sequence, subject, copy) in rewritten {
                // The copy first: were the erase cut off between the two, the words stay
                // until the next forget finds them, and nothing of anyone else's is lost.
                let ack =
                    self.js.publish(subject, copy.into()).await.map_err(|e| fail(format!("republishing sequence {sequence}: {e}")))?;
                ack.await.map_err(|e| fail(format!("republishing sequence {sequence}: {e}")))?;
                match stream.delete_message(sequence).await {
                    Ok(_) => *erased.rewritten.entry(spec.name).or_default() += 1,
                    Err(e) if e.to_string().contains("no message found") => {}
                    Err(e) => return Err(fail(format!("erasing sequence {sequence}: {e}"))),
                }
            }
            let mut n = 0;
            for sequence in found {
                match stream.delete_message(sequence).await {
                    Ok(_) => n += 1,
                    // Gone already (aged out, or erased by a forget before this one).
                    Err(e) if e.to_string().contains("no message found") => {}
                    Err(e) => return Err(fail(format!("erasing sequence {sequence}: {e}"))),
                }
            }
            *erased.by_stream.entry(spec.name).or_default() += n;
        }
        erased.attachments.sort_unstable();
        erased.attachments.dedup();
        Ok(erased)
    }

    /// Erases one delivered message from its stream, by sequence: an event that must not be
    /// kept (a forgotten person's edit of what they wrote before the forget). Gone already is
    /// not an error.
    pub async fn erase_delivered<E>(&self, d: &crate::Delivery<E>) -> Result<(), BusError> {
        let Some(spec) = stream_for(d.subject.family()) else { return Ok(()) };
        let fail = |detail: String| BusError::Stream { stream: spec.name, detail };
        let stream = self.js.get_stream(spec.name).await.map_err(|e| fail(e.to_string()))?;
        match stream.delete_message(d.stream_sequence).await {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("no message found") => Ok(()),
            Err(e) => Err(fail(format!("erasing sequence {}: {e}", d.stream_sequence))),
        }
    }

    /// Hands `seen` (stream sequence, payload) for every stored message of `family`, oldest
    /// first, up to the newest there was when the read began; nothing for a family no stream
    /// keeps.
    pub async fn read_family(&self, family: Family, mut seen: impl FnMut(u64, &[u8])) -> Result<(), BusError> {
        self.read_family_on(family, |sequence, _, payload| seen(sequence, payload)).await
    }

    /// [`Bus::read_family`], with the subject each message was published on.
    async fn read_family_on(&self, family: Family, mut seen: impl FnMut(u64, &str, &[u8])) -> Result<(), BusError> {
        let Some(spec) = stream_for(family) else { return Ok(()) };
        let stream = spec.name;
        let fail = |detail: String| BusError::Stream { stream, detail };
        let js_stream = self.js.get_stream(stream).await.map_err(|e| fail(e.to_string()))?;
        let config = pull::OrderedConfig { filter_subject: family.wildcard(), deliver_policy: DeliverPolicy::All, ..Default::default() };
        let mut consumer = js_stream.create_consumer(config).await.map_err(|e| fail(e.to_string()))?;
        let name = consumer.cached_info().name.clone();
        let read = async {
            let pending = consumer.info().await.map_err(|e| fail(e.to_string()))?.num_pending;
            if pending == 0 {
                return Ok(());
            }
            let mut messages = consumer.messages().await.map_err(|e| fail(e.to_string()))?;
            loop {
                let message = match tokio::time::timeout(NEXT_WITHIN, messages.next()).await {
                    Ok(Some(Ok(m))) => m,
                    Ok(Some(Err(e))) => return Err(fail(e.to_string())),
                    Ok(None) => return Ok(()),
                    Err(_) => return Err(fail(format!("no message within {NEXT_WITHIN:?} while reading"))),
                };
                let info = message.info().map_err(|e| fail(e.to_string()))?;
                seen(info.stream_sequence, message.subject.as_str(), &message.payload);
                if info.pending == 0 {
                    return Ok(());
                }
            }
        };
        let result = read.await;
        // Gone at once, not after the server's inactivity threshold: a stream holds a bounded
        // number of consumers, and many forgets in a row would fill it.
        if let Err(e) = js_stream.delete_consumer(&name).await {
            tracing::debug!(error = %e, "a read's consumer was left to the server's inactivity threshold");
        }
        result
    }
}
