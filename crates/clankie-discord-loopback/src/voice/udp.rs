//! The voice server's one UDP socket: IP discovery, the bot's RTP (decrypted, DAVE-decrypted
//! as a human member would, decoded and cut into heard segments), keepalives.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::state::messages::now_ms;
use crate::voice::rtp::{FRAME, SILENCE};
use crate::voice::server::{Capture, VoiceServer};

pub(super) async fn udp_loop(server: Arc<VoiceServer>) {
    let mut buf = vec![0u8; 2048];
    loop {
        let Ok((n, from)) = server.udp.recv_from(&mut buf).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let packet = &buf[..n];
        if n == 74 && packet[0..2] == [0, 1] {
            let mut reply = [0u8; 74];
            reply[0..2].copy_from_slice(&2u16.to_be_bytes());
            reply[2..4].copy_from_slice(&70u16.to_be_bytes());
            reply[4..8].copy_from_slice(&packet[4..8]);
            let ip = from.ip().to_string();
            reply[8..8 + ip.len()].copy_from_slice(ip.as_bytes());
            reply[72..74].copy_from_slice(&from.port().to_be_bytes());
            let _ = server.udp.send_to(&reply, from).await;
        } else if n >= 12 && packet[0] >> 6 == 2 && packet[1] & 0x7F == 0x78 {
            server.hear_rtp(packet, from);
        } else {
            // Keepalives and RTCP from the bot; anything else is noise.
            let mut inner = server.lock();
            VoiceServer::count(&mut inner, if n <= 8 { "keepalive" } else { "other_datagram" });
        }
    }
}

impl VoiceServer {
    fn hear_rtp(&self, packet: &[u8], from: SocketAddr) {
        let mut inner = self.lock();
        let Some((channel, cipher, dave)) =
            inner.conns.values().find(|c| c.bot_udp == Some(from)).and_then(|c| c.cipher.clone().map(|k| (c.channel, k, c.dave)))
        else {
            VoiceServer::count(&mut inner, "rtp_from_stranger");
            return;
        };
        let csrcs = usize::from(packet[0] & 0x0F);
        let extension = packet[0] & 0x10 != 0;
        let header_len = 12 + 4 * csrcs + if extension { 4 } else { 0 };
        let Some(mut payload) = cipher.open(packet, header_len) else {
            VoiceServer::count(&mut inner, "rtp_unauthenticated");
            return;
        };
        if extension && packet.len() >= 12 + 4 * csrcs + 4 {
            let words = usize::from(u16::from_be_bytes([packet[12 + 4 * csrcs + 2], packet[12 + 4 * csrcs + 3]]));
            payload.drain(..(4 * words).min(payload.len()));
        }
        let ssrc = u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]);
        let ts = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
        if dave && let Some(group) = inner.groups.get_mut(&channel) {
            // What the loopback records is what a human member of the group could decrypt.
            let Some(plain) = group.hear_bot(payload, now_ms()) else { return };
            payload = plain;
        }
        if payload == SILENCE {
            return;
        }
        let decoder = match inner.decoders.entry(ssrc) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => match opus2::Decoder::new(48_000, opus2::Channels::Stereo) {
                Ok(d) => v.insert(d),
                Err(_) => return,
            },
        };
        let mut out = vec![0i16; 5760 * 2];
        let Ok(n) = decoder.decode(&payload, &mut out, false) else {
            VoiceServer::count(&mut inner, "opus_undecodable");
            return;
        };
        let mono = clankie_pcm::downmix(&out[..n * 2]);
        let now = now_ms();
        inner.close_quiet_capture(channel, now);
        let capture =
            inner.captures.entry(channel).or_insert_with(|| Capture { start_ms: now, last_ms: now, last_ts: None, pcm: Vec::new() });
        if let Some(last) = capture.last_ts {
            // A gap in the timestamps inside a segment is audio that was lost or not sent: silence.
            let gap = ts.wrapping_sub(last) as usize;
            if gap > FRAME && gap < 48_000 {
                capture.pcm.extend(std::iter::repeat_n(0, gap - FRAME));
            }
        }
        capture.last_ts = Some(ts);
        capture.last_ms = now;
        capture.pcm.extend_from_slice(&mono);
        VoiceServer::count(&mut inner, "rtp_heard");
    }
}
