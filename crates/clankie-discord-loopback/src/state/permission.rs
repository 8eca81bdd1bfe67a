//! Discord's permission bits by name (`twilight_model::guild::Permissions` has the same),
//! and the sets the loopback starts its roles with.

pub const CREATE_INSTANT_INVITE: u64 = 1 << 0;
pub const KICK_MEMBERS: u64 = 1 << 1;
pub const BAN_MEMBERS: u64 = 1 << 2;
pub const ADMINISTRATOR: u64 = 1 << 3;
pub const MANAGE_CHANNELS: u64 = 1 << 4;
pub const MANAGE_GUILD: u64 = 1 << 5;
pub const ADD_REACTIONS: u64 = 1 << 6;
pub const VIEW_AUDIT_LOG: u64 = 1 << 7;
pub const PRIORITY_SPEAKER: u64 = 1 << 8;
pub const STREAM: u64 = 1 << 9;
pub const VIEW_CHANNEL: u64 = 1 << 10;
pub const SEND_MESSAGES: u64 = 1 << 11;
pub const SEND_TTS_MESSAGES: u64 = 1 << 12;
pub const MANAGE_MESSAGES: u64 = 1 << 13;
pub const EMBED_LINKS: u64 = 1 << 14;
pub const ATTACH_FILES: u64 = 1 << 15;
pub const READ_MESSAGE_HISTORY: u64 = 1 << 16;
pub const MENTION_EVERYONE: u64 = 1 << 17;
pub const USE_EXTERNAL_EMOJIS: u64 = 1 << 18;
pub const VIEW_GUILD_INSIGHTS: u64 = 1 << 19;
pub const CONNECT: u64 = 1 << 20;
pub const SPEAK: u64 = 1 << 21;
pub const MUTE_MEMBERS: u64 = 1 << 22;
pub const DEAFEN_MEMBERS: u64 = 1 << 23;
pub const MOVE_MEMBERS: u64 = 1 << 24;
pub const USE_VAD: u64 = 1 << 25;
pub const CHANGE_NICKNAME: u64 = 1 << 26;
pub const MANAGE_NICKNAMES: u64 = 1 << 27;
pub const MANAGE_ROLES: u64 = 1 << 28;
pub const MANAGE_WEBHOOKS: u64 = 1 << 29;
pub const MANAGE_GUILD_EXPRESSIONS: u64 = 1 << 30;
pub const USE_APPLICATION_COMMANDS: u64 = 1 << 31;
pub const REQUEST_TO_SPEAK: u64 = 1 << 32;
pub const MANAGE_EVENTS: u64 = 1 << 33;
pub const MANAGE_THREADS: u64 = 1 << 34;
pub const CREATE_PUBLIC_THREADS: u64 = 1 << 35;
pub const CREATE_PRIVATE_THREADS: u64 = 1 << 36;
pub const USE_EXTERNAL_STICKERS: u64 = 1 << 37;
pub const SEND_MESSAGES_IN_THREADS: u64 = 1 << 38;
pub const USE_EMBEDDED_ACTIVITIES: u64 = 1 << 39;
pub const MODERATE_MEMBERS: u64 = 1 << 40;
pub const VIEW_CREATOR_MONETIZATION_ANALYTICS: u64 = 1 << 41;
pub const USE_SOUNDBOARD: u64 = 1 << 42;
pub const CREATE_GUILD_EXPRESSIONS: u64 = 1 << 43;
pub const CREATE_EVENTS: u64 = 1 << 44;
pub const USE_EXTERNAL_SOUNDS: u64 = 1 << 45;
pub const SEND_VOICE_MESSAGES: u64 = 1 << 46;
pub const SET_VOICE_CHANNEL_STATUS: u64 = 1 << 48;
pub const SEND_POLLS: u64 = 1 << 49;
pub const USE_EXTERNAL_APPS: u64 = 1 << 50;
pub const PIN_MESSAGES: u64 = 1 << 51;
pub const BYPASS_SLOWMODE: u64 = 1 << 52;

/// Every permission Discord defines: what the owner and an administrator have.
pub const ALL: u64 = ((1 << 53) - 1) & !(1 << 47);

/// What a new server's @everyone may do, as Discord creates it.
pub const DEFAULT_EVERYONE: u64 = CREATE_INSTANT_INVITE
    | ADD_REACTIONS
    | STREAM
    | VIEW_CHANNEL
    | SEND_MESSAGES
    | EMBED_LINKS
    | ATTACH_FILES
    | READ_MESSAGE_HISTORY
    | MENTION_EVERYONE
    | USE_EXTERNAL_EMOJIS
    | CONNECT
    | SPEAK
    | USE_VAD
    | CHANGE_NICKNAME
    | USE_APPLICATION_COMMANDS
    | REQUEST_TO_SPEAK
    | CREATE_PUBLIC_THREADS
    | CREATE_PRIVATE_THREADS
    | USE_EXTERNAL_STICKERS
    | SEND_MESSAGES_IN_THREADS
    | USE_EMBEDDED_ACTIVITIES
    | USE_SOUNDBOARD
    | CREATE_GUILD_EXPRESSIONS
    | CREATE_EVENTS
    | USE_EXTERNAL_SOUNDS
    | SEND_VOICE_MESSAGES
    | SEND_POLLS
    | USE_EXTERNAL_APPS;

/// What `clankie invite` asks for (274881154112): View Channels, Send Messages, Send Messages in
/// Threads, Read Message History, Attach Files, Add Reactions, Connect, Speak. The bot's managed
/// role has these.
pub const BOT_INVITE: u64 =
    VIEW_CHANNEL | SEND_MESSAGES | SEND_MESSAGES_IN_THREADS | READ_MESSAGE_HISTORY | ATTACH_FILES | ADD_REACTIONS | CONNECT | SPEAK;

/// What `clankie invite` asked for before it asked for Send Messages in Threads (3247168): the
/// managed role of a bot invited then.
pub const BOT_INVITE_WITHOUT_THREADS: u64 = BOT_INVITE & !SEND_MESSAGES_IN_THREADS;

/// What a voice channel takes away without CONNECT (Discord's implicit denial).
pub const VOICE: u64 = PRIORITY_SPEAKER
    | STREAM
    | CONNECT
    | SPEAK
    | MUTE_MEMBERS
    | DEAFEN_MEMBERS
    | MOVE_MEMBERS
    | USE_VAD
    | REQUEST_TO_SPEAK
    | USE_EMBEDDED_ACTIVITIES
    | USE_SOUNDBOARD
    | USE_EXTERNAL_SOUNDS
    | SET_VOICE_CHANNEL_STATUS
    | MANAGE_CHANNELS
    | MANAGE_ROLES;

/// What SEND_MESSAGES denied takes with it (Discord's implicit denial).
pub const SENDING: u64 = MENTION_EVERYONE | SEND_TTS_MESSAGES | ATTACH_FILES | EMBED_LINKS;

/// What the bot may do in a DM: no roles or overwrites there, only the channel's own rules.
pub const IN_DM: u64 =
    VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY | ADD_REACTIONS | ATTACH_FILES | EMBED_LINKS | USE_EXTERNAL_EMOJIS;
