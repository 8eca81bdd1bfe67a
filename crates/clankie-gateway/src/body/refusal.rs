//! What Discord's answer to a failed request means for the message: try again, refused for
//! good, or denied for a permission an operator can grant (named in the receipt as codes).

use clankie_proto::v1;

/// What a failed post means for the outbound message.
pub(crate) enum PostError {
    /// Worth another try later (5xx, rate limit, network).
    Retry,
    /// Discord refused it for good.
    Refused(u16),
    /// Discord refused it for a permission the bot lacks there (403 with 50001, 50007 or
    /// 50013): an operator's mend in the server settings, named in the receipt.
    Denied(Denied),
}

/// Discord's reasons for a 403 that an operator can mend, by its JSON error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denied {
    /// 50001: the bot cannot see the channel (View Channel, or not in the server).
    MissingAccess,
    /// 50013: a permission the request needs is missing in the channel.
    MissingPermissions,
    /// 50007: the person does not take DMs from the server's members.
    CannotMessageUser,
    /// 160002: a reply without Read Message History in the channel.
    CannotReply,
}

impl Denied {
    fn from_code(code: u64) -> Option<Denied> {
        match code {
            50001 => Some(Denied::MissingAccess),
            50013 => Some(Denied::MissingPermissions),
            50007 => Some(Denied::CannotMessageUser),
            160002 => Some(Denied::CannotReply),
            _ => None,
        }
    }

    /// The receipt's codes: the refusal, then each permission the refused request needed
    /// (Discord's 50013 does not say which one of them is missing).
    pub(crate) fn codes(self, needs: &[&'static str]) -> Vec<&'static str> {
        match self {
            Denied::MissingAccess => vec!["missing_access", "needs_view_channel"],
            Denied::MissingPermissions => std::iter::once("missing_permissions").chain(needs.iter().copied()).collect(),
            Denied::CannotMessageUser => vec!["cannot_message_user"],
            Denied::CannotReply => vec!["missing_permissions", "needs_read_message_history"],
        }
    }
}

/// Reads a failed request's answer (and counts the refusals Discord bans a bot for): every
/// REST part settles its message by it.
pub(crate) fn classify(e: &twilight_http::Error) -> PostError {
    use twilight_http::api_error::ApiError;
    // Discord bans a bot that makes too many invalid requests (401, 403, 429) in 10 minutes.
    if let twilight_http::error::ErrorType::Response { status, .. } = e.kind() {
        let status = status.get();
        let class = match status {
            401 => "401",
            403 => "403",
            404 => "404",
            429 => "429",
            500.. => "5xx",
            _ => "4xx",
        };
        metrics::counter!("clankie_gateway_rest_errors_total", "status" => class).increment(1);
    }
    match e.kind() {
        twilight_http::error::ErrorType::Response { status, .. } if status.get() == 429 || status.get() >= 500 => PostError::Retry,
        twilight_http::error::ErrorType::Response { status, error: ApiError::General(general), .. }
            if status.get() == 403 && Denied::from_code(general.code).is_some() =>
        {
            Denied::from_code(general.code).map_or(PostError::Refused(403), PostError::Denied)
        }
        twilight_http::error::ErrorType::Response { status, .. } => PostError::Refused(status.get()),
        _ => PostError::Retry,
    }
}

/// The permissions a reply or text update needs in its channel, as receipt codes.
pub(crate) fn post_needs(out: &v1::OutboundMessage) -> Vec<&'static str> {
    let mut needs = vec!["needs_send_messages"];
    if out.reply_to_message_id.is_some() {
        needs.push("needs_read_message_history");
    }
    if !out.artifacts.is_empty() {
        needs.push("needs_attach_files");
    }
    needs
}
