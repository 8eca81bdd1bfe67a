/// The parts of a service URL the local stack needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    /// The first path segment: the database name for PostgreSQL URLs.
    pub path: Option<String>,
}

/// A URL the local stack cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {what} from the URL: {reason}")]
pub struct EndpointError {
    what: &'static str,
    reason: &'static str,
}

impl EndpointError {
    pub(crate) fn plain(what: &'static str) -> EndpointError {
        EndpointError { what, reason: "use 1 to 63 characters of [A-Za-z0-9_]" }
    }
}

impl Endpoint {
    /// Parses `scheme://[user[:password]@]host[:port][/path][?query]`.
    pub fn parse(url: &str, default_port: u16) -> Result<Endpoint, EndpointError> {
        let (_, rest) = url.split_once("://").ok_or(EndpointError { what: "scheme", reason: "missing ://" })?;
        let rest = rest.split(['?', '#']).next().unwrap_or_default();
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (rest, None),
        };
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hp)) => (Some(userinfo.split(':').next().unwrap_or_default().to_owned()), hp),
            None => (None, authority),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => {
                (h, p.parse().map_err(|_| EndpointError { what: "port", reason: "not a number from 1 to 65535" })?)
            }
            _ => (hostport, default_port),
        };
        if host.is_empty() {
            return Err(EndpointError { what: "host", reason: "empty" });
        }
        Ok(Endpoint {
            host: host.trim_matches(['[', ']']).to_owned(),
            port,
            user: user.filter(|u| !u.is_empty()),
            path: path.map(|p| p.split('/').next().unwrap_or_default().to_owned()).filter(|p| !p.is_empty()),
        })
    }

    /// Whether the host is this machine's loopback.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_postgres_urls() {
        let ep = Endpoint::parse("postgres://clankie:pw@127.0.0.1:55432/clankie?sslmode=disable", 5432).unwrap();
        assert_eq!(ep, Endpoint { host: "127.0.0.1".into(), port: 55432, user: Some("clankie".into()), path: Some("clankie".into()) });
        assert!(ep.is_loopback());
    }

    #[test]
    fn defaults_the_port_and_spots_remote_hosts() {
        let ep = Endpoint::parse("nats://nats.internal", 4222).unwrap();
        assert_eq!(ep.port, 4222);
        assert!(!ep.is_loopback());
    }

    #[test]
    fn rejects_nonsense() {
        assert!(Endpoint::parse("127.0.0.1:4222", 4222).is_err());
        assert!(Endpoint::parse("nats://host:http", 4222).is_err());
        assert!(Endpoint::parse("nats://:4222", 4222).is_err());
    }
}
