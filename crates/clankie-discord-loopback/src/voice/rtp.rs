//! RTP as the voice server speaks it: the two AEAD `_rtpsize` ciphers and the 12-byte header
//! of 20 ms Opus frames.

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::XChaCha20Poly1305;

/// Samples per 20 ms frame at 48 kHz.
pub(super) const FRAME: usize = 960;
/// Opus's three-byte silence frame.
pub(super) const SILENCE: [u8; 3] = [0xF8, 0xFF, 0xFE];

/// One connection's transport cipher, as Select Protocol chose it.
#[derive(Clone)]
pub(crate) enum Cipher {
    Aes(Box<Aes256Gcm>),
    XChaCha(Box<XChaCha20Poly1305>),
}

impl Cipher {
    pub(super) fn new(mode: &str, key: &[u8]) -> Option<Cipher> {
        match mode {
            "aead_aes256_gcm_rtpsize" => Aes256Gcm::new_from_slice(key).ok().map(|c| Cipher::Aes(Box::new(c))),
            "aead_xchacha20_poly1305_rtpsize" => XChaCha20Poly1305::new_from_slice(key).ok().map(|c| Cipher::XChaCha(Box::new(c))),
            _ => None,
        }
    }

    /// header | ciphertext | 16-byte tag | 4-byte nonce counter; the header is the associated data.
    pub(super) fn seal(&self, header: &[u8], payload: &[u8], counter: u32) -> Vec<u8> {
        let mut body = payload.to_vec();
        let tag = match self {
            Cipher::Aes(c) => {
                let mut nonce = aes_gcm::Nonce::default();
                nonce[..4].copy_from_slice(&counter.to_be_bytes());
                c.encrypt_in_place_detached(&nonce, header, &mut body).map(|t| t.to_vec())
            }
            Cipher::XChaCha(c) => {
                let mut nonce = chacha20poly1305::XNonce::default();
                nonce[..4].copy_from_slice(&counter.to_be_bytes());
                c.encrypt_in_place_detached(&nonce, header, &mut body).map(|t| t.to_vec())
            }
        };
        let mut out = header.to_vec();
        out.extend_from_slice(&body);
        out.extend_from_slice(&tag.unwrap_or_else(|_| vec![0; 16]));
        out.extend_from_slice(&counter.to_be_bytes());
        out
    }

    /// The payload of a sealed packet whose header is `header_len` bytes, if it authenticates.
    pub(super) fn open(&self, packet: &[u8], header_len: usize) -> Option<Vec<u8>> {
        if packet.len() < header_len + 20 {
            return None;
        }
        let (header, rest) = packet.split_at(header_len);
        let (body, suffix) = rest.split_at(rest.len() - 20);
        let (tag, counter) = suffix.split_at(16);
        let mut plain = body.to_vec();
        let ok = match self {
            Cipher::Aes(c) => {
                let mut nonce = aes_gcm::Nonce::default();
                nonce[..4].copy_from_slice(counter);
                c.decrypt_in_place_detached(&nonce, header, &mut plain, aes_gcm::Tag::from_slice(tag)).is_ok()
            }
            Cipher::XChaCha(c) => {
                let mut nonce = chacha20poly1305::XNonce::default();
                nonce[..4].copy_from_slice(counter);
                c.decrypt_in_place_detached(&nonce, header, &mut plain, chacha20poly1305::Tag::from_slice(tag)).is_ok()
            }
        };
        ok.then_some(plain)
    }
}

/// A version-2 RTP header of payload type 120.
pub(super) fn rtp_header(seq: u16, ts: u32, ssrc: u32) -> [u8; 12] {
    let mut h = [0u8; 12];
    h[0] = 0x80;
    h[1] = 0x78;
    h[2..4].copy_from_slice(&seq.to_be_bytes());
    h[4..8].copy_from_slice(&ts.to_be_bytes());
    h[8..12].copy_from_slice(&ssrc.to_be_bytes());
    h
}
