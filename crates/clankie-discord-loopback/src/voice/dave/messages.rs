//! DAVE's messages and the values around a group: the frames for the bot, why a step failed,
//! the external sender's key, parsing a key package and op 28's commit and welcome, and what
//! the control API shows of a channel's group.

use std::num::NonZeroU16;

use openmls::prelude::tls_codec::{DeserializeBytes, Serialize as _};
use openmls::prelude::*;
use openmls_basic_credential::SignatureKeyPair;
use openmls_rust_crypto::OpenMlsRustCrypto;
use serde::Serialize;

use crate::state::config::DAVE_VERSION;

/// A frame for the bot's voice socket.
#[derive(Debug, Clone)]
pub(crate) enum BotFrame {
    Text(String),
    Binary(Vec<u8>),
}

/// Why a DAVE step failed; counted by kind, never carrying key material.
#[derive(Debug, thiserror::Error)]
pub enum DaveError {
    #[error("the external sender's key could not be made")]
    Key,
    #[error("a key package that does not verify")]
    KeyPackage,
    #[error("a human member's session failed: {0}")]
    Human(String),
    #[error("a proposal could not be signed")]
    Proposal,
    #[error("a commit and welcome that do not parse")]
    CommitWelcome,
}

/// The external sender every group names: one P-256 key per voice server.
pub(crate) struct ExternalSenderKey {
    pub(super) signer: SignatureKeyPair,
    pub(super) package: Vec<u8>,
}

impl ExternalSenderKey {
    pub(crate) fn new() -> Result<ExternalSenderKey, DaveError> {
        let signer = SignatureKeyPair::new(SignatureScheme::ECDSA_SECP256R1_SHA256).map_err(|_| DaveError::Key)?;
        let credential: Credential = BasicCredential::new(vec![0, 1, 1, 0]).into();
        let sender = ExternalSender::new(signer.to_public_vec().into(), credential);
        let package = sender.tls_serialize_detached().map_err(|_| DaveError::Key)?;
        Ok(ExternalSenderKey { signer, package })
    }
}

/// What the loopback counted of DAVE, by kind, and when things happened.
#[derive(Debug, Default, Clone, Serialize)]
pub struct DaveCounts {
    /// Frames of his it decrypted: every one carried the marker.
    pub frames_decrypted: u64,
    /// Frames of his that carried the marker and would not decrypt.
    pub frames_undecryptable: u64,
    /// Frames of his without the marker (not silence) after his first transition.
    pub frames_plain_after_transition: u64,
    /// Frames of his without the marker before he was in a group.
    pub frames_plain_before_transition: u64,
    /// Frames a human said, end-to-end encrypted before they went out.
    pub frames_encrypted_for_him: u64,
    pub transitions_executed: u64,
    pub invalid_commit_welcome: u64,
    pub commits_corrupted: u64,
    pub commits_discarded: u64,
    pub key_packages: u64,
}

pub(super) fn human_err(e: impl std::fmt::Display) -> DaveError {
    DaveError::Human(e.to_string())
}

pub(super) fn version() -> NonZeroU16 {
    NonZeroU16::new(DAVE_VERSION).unwrap_or(NonZeroU16::MIN)
}

/// A key package a member sent, verified.
pub(super) fn validate(bytes: &[u8]) -> Result<KeyPackage, DaveError> {
    // tls_codec can panic on hostile lengths in debug builds; a bad package is an error here.
    let parsed = std::panic::catch_unwind(|| KeyPackageIn::tls_deserialize_exact_bytes(bytes)).map_err(|_| DaveError::KeyPackage)?;
    let package = parsed.map_err(|_| DaveError::KeyPackage)?;
    package.validate(OpenMlsRustCrypto::default().crypto(), ProtocolVersion::Mls10).map_err(|_| DaveError::KeyPackage)
}

/// Op 28's body: a commit MLSMessage, then the welcome (if any), with no lengths between.
pub(super) fn split_commit_welcome(bytes: &[u8]) -> Result<(Vec<u8>, Option<Vec<u8>>), DaveError> {
    let parsed = std::panic::catch_unwind(|| MlsMessageIn::tls_deserialize_bytes(bytes).map(|(_, rest)| rest.len()))
        .map_err(|_| DaveError::CommitWelcome)?;
    let rest = parsed.map_err(|_| DaveError::CommitWelcome)?;
    let (commit, welcome) = bytes.split_at(bytes.len() - rest);
    Ok((commit.to_vec(), (!welcome.is_empty()).then(|| welcome.to_vec())))
}

/// A channel's DAVE state as the control API shows it (no key material).
#[derive(Debug, Clone, Serialize)]
pub struct DaveView {
    pub channel: u64,
    pub epoch: u64,
    pub members: Vec<String>,
    pub privacy_code: Option<String>,
    pub bot_first_transition_ms: Option<i64>,
    /// (epoch reached, when) for every executed transition.
    pub executed: Vec<(u64, i64)>,
    pub bot_selected_ms: Option<i64>,
    pub first_decrypted_ms: Option<i64>,
    pub resume_ms: Vec<i64>,
    pub counts: DaveCounts,
}
