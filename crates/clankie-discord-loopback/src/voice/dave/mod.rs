//! DAVE in the loopback voice server: each voice channel's MLS group, with the loopback as its
//! delivery service and external sender, and the loopback's human users as members.
//!
//! A [`Group`] per channel keeps who is in it (in join order, the bot among them), the epoch and
//! the leaves as the members' trees have them, the changes waiting for the next commit, and the
//! one transition in flight. Humans are `davey` sessions run here; the bot is reached through
//! the frames each call returns. The first member already in the group commits (for a new
//! group, the first to come); the bot commits over op 27 → op 28, a human at once. A commit goes
//! to the members (op 29 for the bot), its welcome to those it adds (op 30), and op 22 follows
//! once every member said transition ready (op 23) or could not use it (op 31, after which the
//! bot is removed and added again with its new key package). Humans take a commit or welcome
//! when its transition executes, as a Discord client moves its sending key then: what they say
//! during a transition stays readable by a bot still processing the commit.

mod messages;

use std::collections::{BTreeSet, VecDeque};

use davey::{DaveSession, MediaType, ProposalsOperationType};
use openmls::prelude::tls_codec::Serialize as _;
use openmls::prelude::*;
use openmls_rust_crypto::OpenMlsRustCrypto;
use serde_json::json;

pub(crate) use messages::{BotFrame, DaveError, ExternalSenderKey};
pub use messages::{DaveCounts, DaveView};
use messages::{human_err, split_commit_welcome, validate, version};

enum Who {
    Human(Box<DaveSession>),
    Bot,
}

struct Member {
    user: u64,
    who: Who,
    /// In the group at the current epoch (its tree has a leaf for it).
    joined: bool,
    /// A human's commit or welcome of the transition in flight, processed when it executes.
    held: Option<Held>,
}

/// What a human holds until its transition executes (op 22): a Discord client keeps sending
/// under the old epoch's key until then, so that a member still processing the commit (the
/// bot) can read it throughout.
enum Held {
    Commit(Vec<u8>),
    Welcome(Vec<u8>),
}

/// A change waiting for the next commit.
#[derive(Clone)]
enum Change {
    Add(u64, Box<KeyPackage>),
    Remove(u64),
}

struct Transition {
    id: u16,
    committer: u64,
    /// What it commits, put back in the queue if its committer goes before committing.
    changes: Vec<Change>,
    /// Waiting for the bot's op 28 (the bot was asked to commit these proposals).
    awaiting_commit: bool,
    /// Members whose op 23 is still to come.
    acks: BTreeSet<u64>,
    adds: Vec<u64>,
    removes: Vec<u64>,
}

/// One voice channel's group.
pub(crate) struct Group {
    channel: u64,
    bot: Option<u64>,
    members: Vec<Member>,
    /// The epoch of the members' group; 0 before the first commit.
    epoch: u64,
    /// Each leaf's user, as the members' trees have them (`None` is a blank leaf).
    leaves: Vec<Option<u64>>,
    changes: VecDeque<Change>,
    transition: Option<Transition>,
    next_transition: u16,
    /// Corrupt the next commit or welcome sent to the bot (a test asks for it).
    pub corrupt_next: bool,
    /// When the bot's first transition executed (ms since the epoch).
    pub bot_first_transition_ms: Option<i64>,
    /// When each transition executed, with the epoch it reached.
    pub executed: Vec<(u64, i64)>,
    /// When the bot's Select Protocol was answered (its handshake starts).
    pub bot_selected_ms: Option<i64>,
    /// When the first frame of his was decrypted.
    pub first_decrypted_ms: Option<i64>,
    /// For each transition after his first: ms from its execution to his next decrypted frame.
    pub resume_ms: Vec<i64>,
    awaiting_resume: Option<i64>,
    pub counts: DaveCounts,
}
impl Group {
    pub(crate) fn new(channel: u64) -> Group {
        Group {
            channel,
            bot: None,
            members: Vec::new(),
            epoch: 0,
            leaves: Vec::new(),
            changes: VecDeque::new(),
            transition: None,
            next_transition: 0,
            corrupt_next: false,
            bot_first_transition_ms: None,
            executed: Vec::new(),
            bot_selected_ms: None,
            first_decrypted_ms: None,
            resume_ms: Vec::new(),
            awaiting_resume: None,
            counts: DaveCounts::default(),
        }
    }

    /// Its epoch as the members have it.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The voice privacy code its human members show, if one is in the group.
    pub(crate) fn privacy_code(&self) -> Option<String> {
        self.members.iter().find_map(|m| match &m.who {
            Who::Human(s) if m.joined => s.voice_privacy_code().map(str::to_owned),
            _ => None,
        })
    }

    /// Whether the group holds nobody.
    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Users in the group at its epoch, in leaf order.
    pub(crate) fn in_group(&self) -> Vec<u64> {
        self.leaves.iter().flatten().copied().collect()
    }

    /// A human enters the channel: a session of its own, its key package queued for adding.
    /// Returns op 11 for the bot (sent before any proposal names them) and whatever follows.
    pub(crate) fn human_joins(&mut self, key: &ExternalSenderKey, user: u64, now: i64) -> Result<Vec<BotFrame>, DaveError> {
        if self.members.iter().any(|m| m.user == user) {
            return Ok(Vec::new());
        }
        let mut session = DaveSession::new(version(), user, self.channel, None).map_err(human_err)?;
        session.set_external_sender(&key.package).map_err(human_err)?;
        let package = session.create_key_package().map_err(human_err)?;
        let package = validate(&package)?;
        self.members.push(Member { user, who: Who::Human(Box::new(session)), joined: false, held: None });
        self.changes.push_back(Change::Add(user, Box::new(package)));
        let mut out = Vec::new();
        if self.bot.is_some() {
            out.push(BotFrame::Text(json!({ "op": 11, "d": { "user_ids": [user.to_string()] } }).to_string()));
        }
        out.extend(self.advance(key, now)?);
        Ok(out)
    }

    /// A human leaves the channel: removed from the group by the next commit.
    pub(crate) fn human_leaves(&mut self, key: &ExternalSenderKey, user: u64, now: i64) -> Result<Vec<BotFrame>, DaveError> {
        self.forget(user);
        self.advance(key, now)
    }

    fn forget(&mut self, user: u64) {
        self.members.retain(|m| m.user != user);
        self.changes.retain(|c| !matches!(c, Change::Add(u, _) if *u == user));
        if self.leaves.contains(&Some(user)) {
            self.changes.push_back(Change::Remove(user));
        }
        if let Some(t) = &mut self.transition {
            t.acks.remove(&user);
            if t.awaiting_commit && t.committer == user {
                // It went before committing: what it was asked to commit waits for the next.
                let changes = std::mem::take(&mut t.changes);
                self.transition = None;
                for c in changes.into_iter().rev() {
                    if !matches!(&c, Change::Add(u, _) if *u == user) {
                        self.changes.push_front(c);
                    }
                }
            }
        }
        if self.members.is_empty() {
            // Nobody holds the group any more: the next to come starts a new one.
            self.epoch = 0;
            self.leaves.clear();
            self.changes.clear();
            self.transition = None;
        }
    }

    /// The bot identifies in the channel: a new member whose key package comes over op 26. A
    /// bot already here (a new session, not a resume) is removed first. Returns what follows
    /// Session Description: op 11 with every human here, then op 25.
    pub(crate) fn bot_identifies(&mut self, key: &ExternalSenderKey, user: u64, now: i64) -> Result<Vec<BotFrame>, DaveError> {
        if self.bot.is_some() {
            self.bot_leaves(key, now)?;
        }
        self.bot = Some(user);
        self.bot_selected_ms = Some(now);
        self.members.push(Member { user, who: Who::Bot, joined: false, held: None });
        let humans: Vec<String> = self.members.iter().filter(|m| m.user != user).map(|m| m.user.to_string()).collect();
        let mut out = vec![BotFrame::Text(json!({ "op": 11, "d": { "user_ids": humans } }).to_string())];
        let mut package = vec![25u8];
        package.extend_from_slice(&key.package);
        out.push(BotFrame::Binary(package));
        Ok(out)
    }

    /// The bot is gone from the channel (left, moved, or its session ended).
    pub(crate) fn bot_leaves(&mut self, key: &ExternalSenderKey, now: i64) -> Result<Vec<BotFrame>, DaveError> {
        let Some(bot) = self.bot.take() else { return Ok(Vec::new()) };
        self.forget(bot);
        self.advance(key, now)
    }

    /// Op 26: the bot's key package, queued for adding (a second one replaces the first).
    pub(crate) fn bot_key_package(&mut self, key: &ExternalSenderKey, bytes: &[u8], now: i64) -> Result<Vec<BotFrame>, DaveError> {
        let Some(bot) = self.bot else { return Ok(Vec::new()) };
        let package = validate(bytes)?;
        self.counts.key_packages += 1;
        self.changes.retain(|c| !matches!(c, Change::Add(u, _) if *u == bot));
        self.changes.push_back(Change::Add(bot, Box::new(package)));
        self.advance(key, now)
    }

    /// Op 28: the bot's commit (and welcome) for the proposals it was sent.
    pub(crate) fn bot_commit_welcome(&mut self, key: &ExternalSenderKey, bytes: &[u8], now: i64) -> Result<Vec<BotFrame>, DaveError> {
        if !self.transition.as_ref().is_some_and(|t| t.awaiting_commit) {
            self.counts.commits_discarded += 1;
            return Ok(Vec::new());
        }
        let (commit, welcome) = split_commit_welcome(bytes)?;
        self.deliver(key, commit, welcome, now)
    }

    /// Op 23 from the bot.
    pub(crate) fn bot_ready(&mut self, key: &ExternalSenderKey, transition: u16, now: i64) -> Result<Vec<BotFrame>, DaveError> {
        let Some(bot) = self.bot else { return Ok(Vec::new()) };
        if let Some(t) = &mut self.transition
            && t.id == transition
        {
            t.acks.remove(&bot);
        }
        self.finish_if_ready(key, now)
    }

    /// Op 31: the bot could not use a commit or welcome. It resets and sends a new key package;
    /// the group removes its leaf and adds it again with that package.
    pub(crate) fn bot_invalid(&mut self, key: &ExternalSenderKey, transition: u16, now: i64) -> Result<Vec<BotFrame>, DaveError> {
        let Some(bot) = self.bot else { return Ok(Vec::new()) };
        self.counts.invalid_commit_welcome += 1;
        if let Some(t) = &mut self.transition
            && t.id == transition
        {
            t.acks.remove(&bot);
        }
        if let Some(m) = self.members.iter_mut().find(|m| m.user == bot) {
            m.joined = false;
        }
        if self.leaves.contains(&Some(bot)) && !self.changes.iter().any(|c| matches!(c, Change::Remove(u) if *u == bot)) {
            self.changes.push_front(Change::Remove(bot));
        }
        self.finish_if_ready(key, now)
    }

    /// End-to-end encrypts what a human says, once its session is in the group.
    pub(crate) fn encrypt_from(&mut self, user: u64, opus: &[u8]) -> Vec<u8> {
        let Some(Member { who: Who::Human(session), .. }) = self.members.iter_mut().find(|m| m.user == user) else {
            return opus.to_vec();
        };
        if !session.is_ready() {
            return opus.to_vec();
        }
        match session.encrypt_opus(opus) {
            Ok(frame) => {
                if frame.as_ref() != opus {
                    self.counts.frames_encrypted_for_him += 1;
                }
                frame.into_owned()
            }
            Err(_) => opus.to_vec(),
        }
    }

    /// What the bot said, as a human member hears it: decrypted when it carries the DAVE marker
    /// (`None` when no human here can), counted when it does not.
    pub(crate) fn hear_bot(&mut self, frame: Vec<u8>, now: i64) -> Option<Vec<u8>> {
        let bot = self.bot?;
        let marked = frame.len() >= 11 && frame.ends_with(&[0xFA, 0xFA]);
        if !marked {
            if frame != davey::OPUS_SILENCE_PACKET {
                if self.bot_first_transition_ms.is_some_and(|t| t <= now) {
                    self.counts.frames_plain_after_transition += 1;
                } else {
                    self.counts.frames_plain_before_transition += 1;
                }
            }
            return Some(frame);
        }
        for member in &mut self.members {
            if let Who::Human(session) = &mut member.who
                && member.joined
                && session.is_ready()
                && let Ok(plain) = session.decrypt(bot, MediaType::AUDIO, &frame)
            {
                self.counts.frames_decrypted += 1;
                self.first_decrypted_ms.get_or_insert(now);
                if let Some(at) = self.awaiting_resume.take() {
                    self.resume_ms.push(now - at);
                }
                return Some(plain);
            }
        }
        self.counts.frames_undecryptable += 1;
        None
    }

    /// Commits what is waiting, when nothing is in flight.
    fn advance(&mut self, key: &ExternalSenderKey, now: i64) -> Result<Vec<BotFrame>, DaveError> {
        if self.transition.is_some() || self.changes.is_empty() {
            return Ok(Vec::new());
        }
        // The committer: the first member in the group; for a new group, the first who came
        // with a key package (it creates the group rather than being added to it).
        let committer = match self.members.iter().find(|m| m.joined) {
            Some(m) => m.user,
            None => {
                let Some(first) = self.members.iter().find(|m| self.changes.iter().any(|c| matches!(c, Change::Add(u, _) if *u == m.user)))
                else {
                    return Ok(Vec::new());
                };
                let user = first.user;
                self.changes.retain(|c| !matches!(c, Change::Add(u, _) if *u == user));
                self.leaves = vec![Some(user)];
                self.epoch = 0;
                if let Some(m) = self.members.iter_mut().find(|m| m.user == user) {
                    m.joined = true;
                }
                user
            }
        };
        if self.changes.is_empty() {
            return Ok(Vec::new());
        }
        let group_id = GroupId::from_slice(&self.channel.to_be_bytes());
        let mut messages = Vec::new();
        let (mut adds, mut removes) = (Vec::new(), Vec::new());
        let changes: Vec<Change> = self.changes.drain(..).collect();
        for change in &changes {
            let message = match change {
                Change::Add(user, package) => {
                    adds.push(*user);
                    ExternalProposal::new_add::<OpenMlsRustCrypto>(
                        (**package).clone(),
                        group_id.clone(),
                        self.epoch.into(),
                        &key.signer,
                        SenderExtensionIndex::new(0),
                    )
                    .map_err(|_| DaveError::Proposal)?
                }
                Change::Remove(user) => {
                    let Some(leaf) = self.leaves.iter().position(|l| *l == Some(*user)) else { continue };
                    removes.push(*user);
                    ExternalProposal::new_remove::<OpenMlsRustCrypto>(
                        LeafNodeIndex::new(leaf as u32),
                        group_id.clone(),
                        self.epoch.into(),
                        &key.signer,
                        SenderExtensionIndex::new(0),
                    )
                    .map_err(|_| DaveError::Proposal)?
                }
            };
            messages.extend(message.tls_serialize_detached().map_err(|_| DaveError::Proposal)?);
        }
        if adds.is_empty() && removes.is_empty() {
            return Ok(Vec::new());
        }
        let proposals = VLBytes::new(messages).tls_serialize_detached().map_err(|_| DaveError::Proposal)?;
        self.next_transition = self.next_transition.checked_add(1).unwrap_or(1);
        let id = self.next_transition;
        self.transition = Some(Transition { id, committer, changes, awaiting_commit: true, acks: BTreeSet::new(), adds, removes });
        // Every member in the group stores the proposals (a commit names them by reference);
        // only the committer's commit is used.
        let mut out = Vec::new();
        let mut commit = None;
        for member in self.members.iter_mut().filter(|m| m.joined) {
            match &mut member.who {
                Who::Human(session) => {
                    let made = session.process_proposals(ProposalsOperationType::APPEND, &proposals, None).map_err(human_err)?;
                    if member.user == committer {
                        commit = Some(made.ok_or_else(|| DaveError::Human("proposals made no commit".into()))?);
                    }
                }
                Who::Bot => {
                    let mut frame = vec![27u8, 0];
                    frame.extend_from_slice(&proposals);
                    out.push(BotFrame::Binary(frame));
                }
            }
        }
        if let Some(commit) = commit {
            out.extend(self.deliver(key, commit.commit, commit.welcome, now)?);
        }
        Ok(out)
    }

    /// The commit reaches the members and the welcome those it adds.
    fn deliver(
        &mut self,
        key: &ExternalSenderKey,
        commit: Vec<u8>,
        welcome: Option<Vec<u8>>,
        now: i64,
    ) -> Result<Vec<BotFrame>, DaveError> {
        let Some(t) = self.transition.as_mut() else { return Ok(Vec::new()) };
        t.awaiting_commit = false;
        t.changes.clear();
        let id = t.id;
        let adds = t.adds.clone();
        let removes = t.removes.clone();
        // The members' trees: removes blank their leaves, then each add takes the leftmost blank.
        for user in &removes {
            if let Some(leaf) = self.leaves.iter_mut().find(|l| **l == Some(*user)) {
                *leaf = None;
            }
        }
        for user in &adds {
            match self.leaves.iter_mut().find(|l| l.is_none()) {
                Some(blank) => *blank = Some(*user),
                None => self.leaves.push(Some(*user)),
            }
        }
        while self.leaves.last().is_some_and(Option::is_none) {
            self.leaves.pop();
        }
        self.epoch += 1;
        let mut out = Vec::new();
        let mut acks = BTreeSet::new();
        let corrupt = std::mem::take(&mut self.corrupt_next);
        let mut corrupted = false;
        for member in &mut self.members {
            let added = adds.contains(&member.user);
            if !member.joined && !added {
                continue;
            }
            match &mut member.who {
                Who::Human(_) => {
                    member.held =
                        Some(if added { Held::Welcome(welcome.clone().unwrap_or_default()) } else { Held::Commit(commit.clone()) });
                }
                Who::Bot => {
                    let (op, body) = if added { (30u8, welcome.clone().unwrap_or_default()) } else { (29u8, commit.clone()) };
                    let mut frame = vec![op];
                    frame.extend_from_slice(&id.to_be_bytes());
                    let start = frame.len();
                    frame.extend(body);
                    if corrupt && frame.len() > start + 8 {
                        let middle = start + (frame.len() - start) / 2;
                        frame[middle] ^= 0xFF;
                        frame.truncate(frame.len() - 4);
                        corrupted = true;
                    }
                    out.push(BotFrame::Binary(frame));
                    acks.insert(member.user);
                }
            }
            member.joined = true;
        }
        if corrupted {
            self.counts.commits_corrupted += 1;
        } else if corrupt {
            self.corrupt_next = true;
        }
        if let Some(t) = self.transition.as_mut() {
            t.acks = acks;
        }
        out.extend(self.finish_if_ready(key, now)?);
        Ok(out)
    }

    fn finish_if_ready(&mut self, key: &ExternalSenderKey, now: i64) -> Result<Vec<BotFrame>, DaveError> {
        let Some(t) = &self.transition else { return self.advance(key, now) };
        if t.awaiting_commit || !t.acks.is_empty() {
            return Ok(Vec::new());
        }
        let id = t.id;
        self.transition = None;
        for member in &mut self.members {
            if let (Who::Human(session), Some(held)) = (&mut member.who, member.held.take()) {
                match held {
                    Held::Commit(commit) => session.process_commit(&commit).map_err(human_err)?,
                    Held::Welcome(welcome) => session.process_welcome(&welcome).map_err(human_err)?,
                }
            }
        }
        self.counts.transitions_executed += 1;
        self.executed.push((self.epoch, now));
        let mut out = Vec::new();
        let bot_in = self.bot.is_some_and(|b| self.members.iter().any(|m| m.user == b && m.joined));
        if bot_in {
            out.push(BotFrame::Text(json!({ "op": 22, "d": { "transition_id": id } }).to_string()));
            if self.bot_first_transition_ms.is_some() {
                self.awaiting_resume = Some(now);
            }
            self.bot_first_transition_ms.get_or_insert(now);
        }
        out.extend(self.advance(key, now)?);
        Ok(out)
    }
}

impl Group {
    pub(crate) fn view(&self) -> DaveView {
        DaveView {
            channel: self.channel,
            epoch: self.epoch(),
            members: self.in_group().iter().map(u64::to_string).collect(),
            privacy_code: self.privacy_code(),
            bot_first_transition_ms: self.bot_first_transition_ms,
            executed: self.executed.clone(),
            bot_selected_ms: self.bot_selected_ms,
            first_decrypted_ms: self.first_decrypted_ms,
            resume_ms: self.resume_ms.clone(),
            counts: self.counts.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three humans and a bot played by a session here: every join and leave moves the epoch,
    /// and every member can read what another says.
    #[test]
    fn dave_group_humans_join_and_leave_and_keep_reading_each_other() {
        let key = ExternalSenderKey::new().unwrap();
        let mut group = Group::new(300);
        group.human_joins(&key, 1, 0).unwrap();
        assert_eq!(group.epoch(), 0, "alone, nobody to commit");
        group.human_joins(&key, 2, 0).unwrap();
        assert_eq!(group.epoch(), 1);
        assert_eq!(group.in_group(), vec![1, 2]);
        let code = group.privacy_code().unwrap();
        group.human_joins(&key, 3, 0).unwrap();
        assert_eq!(group.epoch(), 2);
        assert_ne!(group.privacy_code().unwrap(), code, "the code changes with the group");
        group.human_leaves(&key, 1, 0).unwrap();
        assert_eq!(group.epoch(), 3);
        assert_eq!(group.in_group(), vec![2, 3]);
        let frame = group.encrypt_from(2, &[0x78, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert!(frame.ends_with(&[0xFA, 0xFA]));
        let Some(Member { who: Who::Human(s3), .. }) = group.members.iter_mut().find(|m| m.user == 3) else { panic!() };
        assert_eq!(s3.decrypt(2, MediaType::AUDIO, &frame).unwrap(), vec![0x78, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    }
}
