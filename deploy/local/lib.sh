# Shared by deploy/local/run, deploy/local/test and .ci/run. Source it; do not run it.

say() { printf '\033[1mclankie:\033[0m %s\n' "$*" >&2; }

# Installs the Debian packages the stack and the build need, saying what and why.
ensure_packages() {
  local missing=() why=()
  command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || { missing+=(nats-server); why+=("nats-server: the JetStream bus"); }
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { missing+=(postgresql); why+=("postgresql: lane state and receipts"); }
  command -v cmake >/dev/null 2>&1 || { missing+=(cmake); why+=("cmake: builds the voice codec"); }
  command -v setsid >/dev/null 2>&1 || { missing+=(util-linux); why+=("util-linux: setsid, runuser"); }
  if [ "${CLANKIE_WITH_BROWSER:-0}" = "1" ]; then
    command -v chromedriver >/dev/null 2>&1 || { missing+=(chromium chromium-driver); why+=("chromium, chromium-driver: the browse tool and the browser tests"); }
  fi
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  local reason
  reason=$(IFS=';'; echo "${why[*]}")
  say "installing Debian packages with apt-get: ${missing[*]} (${reason//;/, })"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
  say "installed ${missing[*]}"
}

# Builds the clankie CLI and brings up nats-server and PostgreSQL (idempotent).
stack_up() {
  say "building the clankie CLI"
  cargo build -q -p clankie --bin clankie
  "$(target_dir)/debug/clankie" stack up
}

target_dir() {
  if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    echo "$CARGO_TARGET_DIR"
  else
    echo "$(git rev-parse --show-toplevel 2>/dev/null || pwd)/target"
  fi
}
