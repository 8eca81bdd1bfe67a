//! Voice activity: whether a tick of a speaker's audio is speech, by earshot's detector and by how
//! the speaker's loudness moves, so that noise and held tones never open a turn.

use crate::config::BodyConfig;

/// Running statistics of 20 ms loudness levels, in dB.
#[derive(Default, Clone, Copy)]
pub(crate) struct Levels {
    n: u32,
    sum: f64,
    sum_sq: f64,
}

impl Levels {
    pub(crate) fn add(&mut self, db: f32) {
        self.n += 1;
        self.sum += f64::from(db);
        self.sum_sq += f64::from(db) * f64::from(db);
    }

    pub(crate) fn deviation(&self) -> f32 {
        if self.n == 0 {
            return 0.0;
        }
        let mean = self.sum / f64::from(self.n);
        (self.sum_sq / f64::from(self.n) - mean * mean).max(0.0).sqrt() as f32
    }
}

/// A tick's loudness in dB (of 16-bit full scale squared, plus one so silence is 0).
pub(crate) fn level_db(pcm: &[i16]) -> f32 {
    let power = pcm.iter().map(|&s| f32::from(s).powi(2)).sum::<f32>() / pcm.len().max(1) as f32;
    10.0 * (power + 1.0).log10()
}

/// Audible ticks before a voice is recognised that count as part of it: 80 ms, the frames the
/// detector needs at a voice's onset.
pub(crate) const ONSET_TICKS: u32 = 4;
/// A tick quieter than this ([`level_db`]'s scale: an RMS of about 30 in 16-bit samples) is no
/// onset of anything.
pub(crate) const AUDIBLE_DB: f32 = 30.0;

/// Ticks of loudness a speaker's modulation is judged over: 400 ms.
const MODULATION_TICKS: usize = 20;

/// Samples earshot judges at once: 16 ms at [`HEARD_RATE`](crate::decode::HEARD_RATE).
const VAD_FRAME: usize = 256;

/// One speaker's voice activity detector (earshot's small network, weights in the crate).
pub(crate) struct Vad {
    detector: Box<earshot::Detector>,
    /// Samples waiting for a whole frame.
    carry: Vec<i16>,
    /// The last frame's score, for a tick that completed no frame.
    score: f32,
    /// The loudness of this speaker's last ticks heard.
    recent: std::collections::VecDeque<f32>,
}

impl Vad {
    pub(crate) fn new() -> Vad {
        Vad { detector: Box::default(), carry: Vec::with_capacity(2 * VAD_FRAME), score: 0.0, recent: Default::default() }
    }

    /// Whether a tick of `pcm` is voice: the detector hears speech in it and, once there is
    /// 400 ms to judge by, the speaker's loudness moves as speech does.
    pub(crate) fn voiced(&mut self, pcm: &[i16], config: &BodyConfig) -> bool {
        let score = self.score(pcm);
        self.recent.push_back(level_db(pcm));
        while self.recent.len() > MODULATION_TICKS {
            self.recent.pop_front();
        }
        let mut window = Levels::default();
        self.recent.iter().for_each(|&db| window.add(db));
        let modulated = self.recent.len() < MODULATION_TICKS || window.deviation() >= config.min_modulation_db;
        score >= config.vad_threshold && modulated
    }

    /// The highest speech score among the frames `pcm` completes.
    fn score(&mut self, pcm: &[i16]) -> f32 {
        self.carry.extend_from_slice(pcm);
        let mut best: Option<f32> = None;
        let mut at = 0;
        while self.carry.len() - at >= VAD_FRAME {
            let score = self.detector.predict_i16(&self.carry[at..at + VAD_FRAME]);
            best = Some(best.map_or(score, |b: f32| b.max(score)));
            at += VAD_FRAME;
        }
        self.carry.drain(..at);
        if let Some(best) = best {
            self.score = best;
        }
        self.score
    }
}
