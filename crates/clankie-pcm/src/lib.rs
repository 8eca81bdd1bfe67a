//! PCM and WAV helpers shared by the loopback voice server, the audio body and their tests:
//! sample formats, resampling, WAV files and the similarity measure audio is held to.

/// Mono i16 samples as little-endian f32 bytes in [-1, 1], the raw form songbird plays.
pub fn f32le(pcm: &[i16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pcm.len() * 4);
    for s in pcm {
        out.extend_from_slice(&(f32::from(*s) / 32768.0).to_le_bytes());
    }
    out
}

/// Linear-interpolation resampling of mono PCM from `from` Hz to `to` Hz.
pub fn resample(pcm: &[i16], from: u32, to: u32) -> Vec<i16> {
    if from == to || pcm.is_empty() {
        return pcm.to_vec();
    }
    let n = (pcm.len() as u64 * u64::from(to) / u64::from(from)) as usize;
    let step = f64::from(from) / f64::from(to);
    (0..n)
        .map(|i| {
            let x = i as f64 * step;
            let j = x.floor() as usize;
            let frac = x - j as f64;
            let a = f64::from(pcm[j.min(pcm.len() - 1)]);
            let b = f64::from(pcm[(j + 1).min(pcm.len() - 1)]);
            (a + (b - a) * frac).round().clamp(-32768.0, 32767.0) as i16
        })
        .collect()
}

/// Interleaved stereo to mono, by averaging.
pub fn downmix(stereo: &[i16]) -> Vec<i16> {
    stereo.chunks_exact(2).map(|lr| ((i32::from(lr[0]) + i32::from(lr[1])) / 2) as i16).collect()
}

/// The highest normalised cross-correlation of `heard` against `source` over lags up to
/// `max_lag` samples either way (each signal's mean removed; 1.0 is identical up to gain).
pub fn best_correlation(source: &[i16], heard: &[i16], max_lag: usize) -> f64 {
    let a: Vec<f64> = centred(source);
    let b: Vec<f64> = centred(heard);
    let mut best = 0.0f64;
    for lag in -(max_lag as isize)..=(max_lag as isize) {
        let (mut dot, mut ea, mut eb) = (0.0, 0.0, 0.0);
        for (i, x) in a.iter().enumerate() {
            let j = i as isize + lag;
            if j < 0 || j as usize >= b.len() {
                continue;
            }
            let y = b[j as usize];
            dot += x * y;
            ea += x * x;
            eb += y * y;
        }
        if ea > 0.0 && eb > 0.0 {
            best = best.max(dot / (ea.sqrt() * eb.sqrt()));
        }
    }
    best
}

fn centred(pcm: &[i16]) -> Vec<f64> {
    let mean = pcm.iter().map(|s| f64::from(*s)).sum::<f64>() / pcm.len().max(1) as f64;
    pcm.iter().map(|s| f64::from(*s) - mean).collect()
}

/// Trims leading and trailing near-silence (below `floor` in absolute value).
pub fn trim(pcm: &[i16], floor: i16) -> &[i16] {
    let start = pcm.iter().position(|s| s.unsigned_abs() > floor.unsigned_abs()).unwrap_or(pcm.len());
    let end = pcm.iter().rposition(|s| s.unsigned_abs() > floor.unsigned_abs()).map_or(start, |e| e + 1);
    &pcm[start..end]
}

/// A RIFF WAV file holding mono 16-bit PCM.
pub fn wav(pcm: &[i16], rate: u32) -> Vec<u8> {
    let data_len = (pcm.len() * 2) as u32;
    let mut out = Vec::with_capacity(44 + data_len as usize);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    for s in pcm {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

/// Why a WAV file was refused.
#[derive(Debug, thiserror::Error)]
pub enum WavError {
    #[error("not a RIFF/WAVE file")]
    NotWav,
    #[error("only 16-bit PCM WAV is accepted (format {format}, {bits} bits)")]
    Unsupported { format: u16, bits: u16 },
    #[error("the WAV file is truncated")]
    Truncated,
}

/// Mono 16-bit PCM and its rate from a WAV file (stereo is downmixed).
pub fn read_wav(bytes: &[u8]) -> Result<(Vec<i16>, u32), WavError> {
    if bytes.len() < 12 || &bytes[0..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return Err(WavError::NotWav);
    }
    let u16_at = |i: usize| bytes.get(i..i + 2).map(|b| u16::from_le_bytes([b[0], b[1]])).ok_or(WavError::Truncated);
    let u32_at = |i: usize| bytes.get(i..i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok_or(WavError::Truncated);
    let mut at = 12;
    let mut fmt: Option<(u16, u16, u32, u16)> = None;
    while at + 8 <= bytes.len() {
        let id = &bytes[at..at + 4];
        let len = u32_at(at + 4)? as usize;
        let body = at + 8;
        if id == b"fmt " {
            fmt = Some((u16_at(body)?, u16_at(body + 2)?, u32_at(body + 4)?, u16_at(body + 14)?));
        } else if id == b"data" {
            let (format, channels, rate, bits) = fmt.ok_or(WavError::NotWav)?;
            if format != 1 || bits != 16 || channels == 0 {
                return Err(WavError::Unsupported { format, bits });
            }
            // espeak-ng streams to a pipe with an unknown length; take what is there.
            let end = if len == 0 || len == u32::MAX as usize { bytes.len() } else { (body + len).min(bytes.len()) };
            let samples: Vec<i16> = bytes[body..end].chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect();
            let mono = match channels {
                1 => samples,
                n => samples
                    .chunks_exact(usize::from(n))
                    .map(|f| (f.iter().map(|s| i32::from(*s)).sum::<i32>() / i32::from(n)) as i16)
                    .collect(),
            };
            return Ok((mono, rate));
        }
        at = body + len + (len & 1);
    }
    Err(WavError::Truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wav_round_trips() {
        let pcm: Vec<i16> = (0..1000).map(|i| ((i * 37) % 2000 - 1000) as i16).collect();
        let (back, rate) = read_wav(&wav(&pcm, 22_050)).unwrap();
        assert_eq!((back, rate), (pcm, 22_050));
    }

    #[test]
    fn correlation_finds_a_shifted_copy_and_rejects_noise() {
        let tone: Vec<i16> = (0..4000).map(|i| ((i as f64 * 0.05).sin() * 8000.0 + (i as f64 * 0.013).sin() * 5000.0) as i16).collect();
        let mut shifted = vec![0i16; 100];
        shifted.extend(tone.iter().map(|s| s / 2));
        assert!(best_correlation(&tone, &shifted, 200) > 0.99);
        let noise: Vec<i16> = (0..4000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 16) as i16).collect();
        assert!(best_correlation(&tone, &noise, 200) < 0.2);
    }
}
