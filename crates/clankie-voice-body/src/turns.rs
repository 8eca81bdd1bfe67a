//! Turns: what a person said up to a pause that ends it (a [`Segment`]), what ended it, and the
//! detector asked whether a pause is the end, so a turn is neither cut mid-sentence nor kept waiting.

use std::time::{Duration, Instant};

use crate::decode::HEARD_RATE;
use crate::hearing::Levels;

/// One person's stretch of speech, from the first packet to the end of their turn.
#[derive(Debug, Clone)]
pub struct Segment {
    pub user_id: u64,
    pub ssrc: u32,
    /// Mono 16-bit PCM at [`HEARD_RATE`].
    pub pcm: Vec<i16>,
    pub started: Instant,
    /// When the turn was ended (by the detector or the silence bound) and the segment cut.
    pub ended: Instant,
    /// When the speech itself ended: the start of the quiet that ended the turn.
    pub speech_ended: Instant,
    /// What ended it.
    pub ended_by: TurnEnd,
}

/// What ended a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    /// The turn detector heard a finished turn after a short pause.
    Finished,
    /// The silence bound, with no turn detector.
    Silence,
    /// The silence bound, after the detector heard the turn as unfinished.
    SilenceAfterUnfinished,
    /// The silence bound, because the detector failed or had not answered by then.
    DetectorUnavailable,
    /// The longest segment.
    Longest,
    /// The speaker's stream went away.
    Gone,
}

impl TurnEnd {
    /// A content-free code for receipts.
    pub fn code(self) -> &'static str {
        match self {
            TurnEnd::Finished => "turn_finished",
            TurnEnd::Silence => "silence",
            TurnEnd::SilenceAfterUnfinished => "silence_after_unfinished",
            TurnEnd::DetectorUnavailable => "turn_detector_unavailable",
            TurnEnd::Longest => "longest",
            TurnEnd::Gone => "gone",
        }
    }
}

/// Tells a finished turn from a pause in the middle of one, by how the speech so far sounds
/// (Smart Turn, for one). Asked after a short silence; the silence bound ends a turn whatever
/// it says, or when it is slow or down.
#[async_trait::async_trait]
pub trait TurnDetector: Send + Sync {
    /// Whether the turn in `pcm` (mono 16-bit at [`HEARD_RATE`], its last seconds) of the
    /// speaker on stream `ssrc` sounds finished. The detector may keep at most one piece of work
    /// per speaker (the speech service transcribes the turn early), so it is told whose turn it is.
    async fn finished(&self, ssrc: u32, pcm: Vec<i16>) -> Result<bool, String>;
}

/// The audio a turn detector judges: the last 8 s, as Smart Turn was trained.
pub(crate) const TURN_WINDOW: usize = 8 * HEARD_RATE as usize;

impl Segment {
    /// Its length as audio.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.pcm.len() as f64 / f64::from(HEARD_RATE))
    }
}

/// One person's turn in progress: the speech so far and where its pauses stand.
pub(crate) struct Speaking {
    pub(crate) user_id: u64,
    pub(crate) pcm: Vec<i16>,
    pub(crate) started: Instant,
    pub(crate) quiet_ticks: u32,
    pub(crate) voiced_ticks: u32,
    /// Ticks since its first voiced one, voiced or not.
    pub(crate) ticks: u32,
    /// The audible ticks that led into it (at most [`ONSET_TICKS`](crate::hearing::ONSET_TICKS)),
    /// which count towards barge-in.
    pub(crate) onset: u32,
    /// The current pause's number: a verdict on an earlier one is stale.
    pub(crate) pause: u32,
    /// Whether the turn detector was asked about the current pause.
    pub(crate) asked: bool,
    pub(crate) announced: bool,
    /// The loudness of every tick heard in it, for the segment's own modulation.
    pub(crate) levels: Levels,
}
