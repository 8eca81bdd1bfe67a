//! The people in a voice channel speaking to the bot: their streams announced (op 5), real Opus
//! sent at real-time pace, packet loss, and hostile traffic injected toward his connection.

use std::time::Duration;

use serde_json::json;

use crate::voice::rtp::{FRAME, SILENCE, rtp_header};
use crate::voice::server::{Inner, Loss, Stream, VoiceError, VoiceServer, WsOut, random_u32};

impl VoiceServer {
    pub(super) fn stream(inner: &mut Inner, channel: u64, user: u64) -> Stream {
        *inner.streams.entry((channel, user)).or_insert_with(|| Stream {
            ssrc: random_u32() | 1,
            seq: rand::random(),
            ts: random_u32(),
            nonce: random_u32(),
        })
    }

    /// Announces that `user` speaks on the bot's socket (op 5), mapping the stream's SSRC to them.
    pub(super) fn announce(&self, guild: u64, channel: u64, user: u64) -> Result<Stream, VoiceError> {
        let mut inner = self.lock();
        let stream = VoiceServer::stream(&mut inner, channel, user);
        let conn = inner.conns.get(&guild).filter(|c| c.channel == channel && c.cipher.is_some()).ok_or(VoiceError::BotAbsent(channel))?;
        let speaking = json!({ "op": 5, "d": { "speaking": 1, "ssrc": stream.ssrc, "user_id": user.to_string(), "delay": 0 } });
        if let Some(ws) = &conn.ws {
            let _ = ws.send(WsOut::Text(speaking.to_string()));
        }
        Ok(stream)
    }

    /// Seals one RTP packet of `user`'s stream and sends it to the bot; false when the bot has no
    /// live connection in the channel right now (the frame is lost, as on a real network).
    async fn send_frame(&self, guild: u64, channel: u64, user: u64, opus: &[u8]) -> bool {
        let (packet, to) = {
            let mut inner = self.lock();
            let mut stream = VoiceServer::stream(&mut inner, channel, user);
            stream.seq = stream.seq.wrapping_add(1);
            stream.ts = stream.ts.wrapping_add(FRAME as u32);
            stream.nonce = stream.nonce.wrapping_add(1);
            inner.streams.insert((channel, user), stream);
            if inner.loss.get(&channel).is_some_and(|l| l.loses(stream.seq)) {
                VoiceServer::count(&mut inner, "rtp_lost");
                return false;
            }
            let Some(conn) = inner.conns.get(&guild).filter(|c| c.channel == channel) else { return false };
            let (Some(cipher), Some(to)) = (conn.cipher.clone(), conn.bot_udp) else { return false };
            let dave = conn.dave;
            // A member of the channel's DAVE group encrypts end to end before the transport does.
            let mut frame = match inner.groups.get_mut(&channel) {
                Some(group) if dave => group.encrypt_from(user, opus),
                _ => opus.to_vec(),
            };
            // Discord's clients pad a few packets in a hundred (RFC 3550 padding, P bit set): so
            // does every 32nd packet here, and a receiver that decodes the padding hears noise.
            let mut header = rtp_header(stream.seq, stream.ts, stream.ssrc);
            if stream.seq % 32 == 7 {
                header[0] |= 0x20;
                frame.extend([0, 0, 3]);
                VoiceServer::count(&mut inner, "rtp_padded");
            }
            (cipher.seal(&header, &frame, stream.nonce), to)
        };
        self.udp.send_to(&packet, to).await.is_ok()
    }

    /// Voices `name` saying `pcm` (mono, `rate` Hz) in `channel`: Speaking, then real Opus at
    /// real-time pace, then five silence frames. Resolves when the last frame is sent; returns
    /// how many frames reached a live connection.
    pub async fn speak(&self, guild: u64, channel: u64, user: u64, name: &str, pcm: &[i16], rate: u32) -> Result<u32, VoiceError> {
        if !self.lock().members.get(&channel).is_some_and(|m| m.contains_key(&user)) {
            return Err(VoiceError::NotInChannel(name.to_owned(), channel));
        }
        self.announce(guild, channel, user)?;
        let at48 = clankie_pcm::resample(pcm, rate, 48_000);
        let mut encoder =
            opus2::Encoder::new(48_000, opus2::Channels::Mono, opus2::Application::Voip).map_err(|e| VoiceError::Opus(e.to_string()))?;
        let mut frames = Vec::new();
        for chunk in at48.chunks(FRAME) {
            let mut frame = chunk.to_vec();
            frame.resize(FRAME, 0);
            frames.push(encoder.encode_vec(&frame, 4000).map_err(|e| VoiceError::Opus(e.to_string()))?);
        }
        frames.extend(std::iter::repeat_n(SILENCE.to_vec(), 5));
        let mut pace = tokio::time::interval(Duration::from_millis(20));
        let mut delivered = 0;
        for frame in &frames {
            pace.tick().await;
            if self.send_frame(guild, channel, user, frame).await {
                delivered += 1;
            }
        }
        Ok(delivered)
    }

    /// Makes the streams of the people in `channel` lose packets on the way to the bot from now
    /// on (`None`: none lost). Their sequence numbers go on, so the bot sees the gaps.
    pub fn set_loss(&self, channel: u64, loss: Option<Loss>) {
        let mut inner = self.lock();
        match loss {
            Some(loss) => inner.loss.insert(channel, loss),
            None => inner.loss.remove(&channel),
        };
    }

    /// Sends one kind of hostile traffic to the bot's connection in `channel`, as `user`'s
    /// stream where a stream is needed.
    pub async fn inject(&self, guild: u64, channel: u64, user: u64, kind: &str) -> Result<(), VoiceError> {
        if kind == "corrupt_commit" {
            let mut inner = self.lock();
            let group = inner.groups.get_mut(&channel).ok_or(VoiceError::BotAbsent(channel))?;
            group.corrupt_next = true;
            VoiceServer::count(&mut inner, "injected_corrupt_commit");
            return Ok(());
        }
        let (to, ws) = {
            let inner = self.lock();
            let conn =
                inner.conns.get(&guild).filter(|c| c.channel == channel && c.cipher.is_some()).ok_or(VoiceError::BotAbsent(channel))?;
            (conn.bot_udp.ok_or(VoiceError::BotAbsent(channel))?, conn.ws.clone())
        };
        match kind {
            "garbage_json" => {
                if let Some(ws) = ws {
                    let _ = ws.send(WsOut::Text("{\"op\": 5, \"d\": {\"speaking\": tru".into()));
                }
            }
            "undersized" => {
                self.udp.send_to(&[0x80, 0x78, 0x00], to).await?;
            }
            "unauthenticated" => {
                let stream = self.announce(guild, channel, user)?;
                let mut packet = rtp_header(stream.seq.wrapping_add(1), stream.ts, stream.ssrc).to_vec();
                packet.extend((0..60).map(|i| (i * 7) as u8));
                self.udp.send_to(&packet, to).await?;
            }
            "unknown_ssrc" => {
                let opus = tone_frame()?;
                let ssrc = random_u32() | 1;
                let (seq, ts, nonce) = (rand::random::<u16>(), random_u32(), random_u32());
                for n in 0..5u16 {
                    let packet = {
                        let inner = self.lock();
                        let Some(cipher) = inner.conns.get(&guild).and_then(|c| c.cipher.clone()) else { break };
                        cipher.seal(
                            &rtp_header(seq.wrapping_add(n), ts.wrapping_add(u32::from(n) * FRAME as u32), ssrc),
                            &opus,
                            nonce.wrapping_add(u32::from(n)),
                        )
                    };
                    self.udp.send_to(&packet, to).await?;
                }
            }
            "truncated_opus" => {
                self.announce(guild, channel, user)?;
                // Inside a short run of good frames (a receiver's jitter buffer plays out only a run):
                // a code-3 packet (TOC's low bits 11) must carry a frame-count byte, and this one ends first.
                let good = tone_frame()?;
                for n in 0..10 {
                    let frame: &[u8] = if n == 5 { &[0xFB] } else { &good };
                    self.send_frame(guild, channel, user, frame).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            other => return Err(VoiceError::UnknownKind(other.to_owned())),
        }
        let mut inner = self.lock();
        let label: &'static str = match kind {
            "garbage_json" => "injected_garbage_json",
            "undersized" => "injected_undersized",
            "unauthenticated" => "injected_unauthenticated",
            "unknown_ssrc" => "injected_unknown_ssrc",
            _ => "injected_truncated_opus",
        };
        VoiceServer::count(&mut inner, label);
        Ok(())
    }
}

/// One 20 ms Opus frame of a quiet tone.
fn tone_frame() -> Result<Vec<u8>, VoiceError> {
    let mut encoder =
        opus2::Encoder::new(48_000, opus2::Channels::Mono, opus2::Application::Voip).map_err(|e| VoiceError::Opus(e.to_string()))?;
    let tone: Vec<i16> = (0..FRAME).map(|i| ((i as f64 * 0.07).sin() * 6000.0) as i16).collect();
    encoder.encode_vec(&tone, 4000).map_err(|e| VoiceError::Opus(e.to_string()))
}
