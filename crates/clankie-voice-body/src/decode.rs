//! Decoding each speaker's Opus packets to mono PCM at [`HEARD_RATE`], with loss concealment for
//! packets that come late: the body decodes itself because songbird 0.6.1 garbles DAVE frames.

use std::collections::HashMap;

use songbird::packet::{Packet as _, PacketSize as _};

use crate::drops;

/// The rate of every PCM buffer the body hands out.
pub const HEARD_RATE: u32 = 16_000;

/// Samples in one 20 ms tick at [`HEARD_RATE`].
const TICK_SAMPLES: usize = (HEARD_RATE as usize) / 50;

/// Per SSRC, the Opus decoder of its stream (mono, at [`HEARD_RATE`]).
#[derive(Default)]
pub(crate) struct Decoders(HashMap<u32, opus2::Decoder>);

impl Decoders {
    /// A received packet's audio, mono at [`HEARD_RATE`]; `None` when it will not decode.
    pub(crate) fn decode(&mut self, ssrc: u32, packet: &songbird::events::context_data::RtpData, suffix: usize) -> Option<Vec<i16>> {
        let frame = opus_frame(&packet.packet, suffix)?;
        let decoder = match self.0.entry(ssrc) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(opus2::Decoder::new(HEARD_RATE, opus2::Channels::Mono).ok()?),
        };
        // Up to 120 ms, Opus's longest packet.
        let mut out = vec![0i16; HEARD_RATE as usize / 1000 * 120];
        match decoder.decode(frame, &mut out, false) {
            Ok(n) => {
                out.truncate(n);
                Some(out)
            }
            Err(_) => {
                drops::count(drops::Drop::BadOpus);
                None
            }
        }
    }

    /// A tick's audio for a packet that did not come in time: the decoder's loss concealment,
    /// which carries the voice on for the tick, as songbird's own decoding did. Without it a
    /// lost packet in the middle of a word would be a tick of quiet, and a loaded machine's
    /// late packets would end turns early. `None` before the stream's first packet.
    pub(crate) fn conceal(&mut self, ssrc: u32) -> Option<Vec<i16>> {
        let decoder = self.0.get_mut(&ssrc)?;
        let mut out = vec![0i16; TICK_SAMPLES];
        let n = decoder.decode(&[], &mut out, false).ok()?;
        out.truncate(n);
        Some(out)
    }

    /// Keeps only the decoders of the streams `keep` holds to.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&u32) -> bool) {
        self.0.retain(|ssrc, _| keep(ssrc));
    }
}

/// The Opus frame a received packet carries: after the RTP header (and extension), before the
/// transport's tag and nonce (`suffix` bytes), without RTP padding and without DAVE's trailer.
///
/// songbird 0.6.1 finds padding and the DAVE frame's end when it decrypts, but decodes from the
/// stored packet with neither taken off; Discord's clients pad a few percent of their packets.
///
/// songbird 0.6.1 decrypts a DAVE frame in place but decodes it at its encrypted length, so its
/// decoder also reads the 12 or so stale bytes of the trailer, which garbles every CELT-coded
/// frame (music, tones, much wideband speech). The plaintext is shorter by exactly the trailer,
/// whose size byte (just before the `0xFAFA` marker) the in-place copy left untouched. songbird
/// keeps no frame it could not decrypt, so a marked frame here is one it decrypted.
fn opus_frame(packet: &[u8], suffix: usize) -> Option<&[u8]> {
    let (header, extension, padded) = {
        let rtp = songbird::packet::rtp::RtpPacket::new(packet)?;
        (packet.len() - rtp.payload().len(), rtp.get_extension() != 0, rtp.get_padding() != 0)
    };
    let mut body = packet.get(header..packet.len().checked_sub(suffix)?)?;
    if padded {
        // RFC 3550 5.1: the last octet counts the padding, itself included.
        let count = usize::from(*body.last()?);
        body = body.get(..body.len().checked_sub(count.max(1))?)?;
    }
    if extension {
        let skip = songbird::packet::rtp::RtpExtensionPacket::new(body).map(|e| e.packet_size())?;
        body = body.get(skip..)?;
    }
    if body.len() >= 11 && body.ends_with(&[0xFA, 0xFA]) {
        let trailer = usize::from(body[body.len() - 3]);
        if (11..=body.len()).contains(&trailer) {
            body = &body[..body.len() - trailer];
        }
    }
    (!body.is_empty()).then_some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A received packet as songbird 0.6.1 keeps one it DAVE-decrypted in place: the plaintext
    /// at the front, then the stale rest of the trailer (ending in its size byte and the marker),
    /// then the transport's 16-byte tag and 4-byte nonce.
    fn packet_as_songbird_keeps_it(opus: &[u8], trailer: usize) -> Vec<u8> {
        let mut packet = vec![0x80, 0x78, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9];
        packet.extend_from_slice(opus);
        packet.extend((0..trailer - 3).map(|i| i as u8 ^ 0x5A));
        packet.extend([trailer as u8, 0xFA, 0xFA]);
        packet.extend([0u8; 20]);
        packet
    }

    #[test]
    fn dave_frames_songbird_decrypted_in_place_are_decoded_without_their_stale_trailer() {
        let mut encoder = opus2::Encoder::new(48_000, opus2::Channels::Mono, opus2::Application::Audio).unwrap();
        let tone: Vec<i16> = (0..960).map(|i| ((i as f64 * 0.11).sin() * 9000.0 + (i as f64 * 0.37).sin() * 4000.0) as i16).collect();
        let opus = encoder.encode_vec(&tone, 4000).unwrap();
        let suffix = songbird::driver::CryptoMode::Aes256Gcm.payload_suffix_len();
        for trailer in [12, 13] {
            let packet = packet_as_songbird_keeps_it(&opus, trailer);
            assert_eq!(opus_frame(&packet, suffix), Some(&opus[..]), "a {trailer}-byte trailer comes off");
        }
        // Padding (the P bit, its count last) comes off before the trailer.
        let mut padded = packet_as_songbird_keeps_it(&opus, 12);
        let tail = padded.split_off(padded.len() - 20);
        padded[0] |= 0x20;
        padded.extend([0, 0, 3]);
        padded.extend(tail);
        assert_eq!(opus_frame(&padded, suffix), Some(&opus[..]), "padding and trailer come off");
        // A plain frame (no marker) is what it is.
        let mut plain = vec![0x80, 0x78, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9];
        plain.extend_from_slice(&opus);
        plain.extend([0u8; 20]);
        assert_eq!(opus_frame(&plain, suffix), Some(&opus[..]));
        // What decoding with the trailer on does to a CELT frame: the audio is not the tone's.
        let mut decoder = opus2::Decoder::new(48_000, opus2::Channels::Mono).unwrap();
        let mut clean = vec![0i16; 960];
        decoder.decode(&opus, &mut clean, false).unwrap();
        let mut decoder = opus2::Decoder::new(48_000, opus2::Channels::Mono).unwrap();
        let mut garbled = vec![0i16; 960];
        let with_trailer = packet_as_songbird_keeps_it(&opus, 12);
        decoder.decode(&with_trailer[12..with_trailer.len() - suffix], &mut garbled, false).unwrap();
        assert_ne!(clean, garbled, "the stale trailer changes what a CELT frame decodes to");
    }
}
