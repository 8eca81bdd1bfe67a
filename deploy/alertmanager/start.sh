#!/bin/sh
# Alertmanager's entrypoint in compose: the shipped config, plus a webhook to ALERT_WEBHOOK_URL
# when `.env` sets one. Alertmanager's config reads no environment, so the file is written here.
set -eu
config=/alertmanager/clankie.yml
cp /etc/alertmanager/clankie.yml "$config"
if [ -n "${ALERT_WEBHOOK_URL:-}" ]; then
  case $ALERT_WEBHOOK_URL in
    *\'*) echo "ALERT_WEBHOOK_URL must not hold a single quote" >&2; exit 1 ;;
  esac
  printf "    webhook_configs:\n      - url: '%s'\n        send_resolved: true\n" "$ALERT_WEBHOOK_URL" >> "$config"
fi
exec /bin/alertmanager --config.file="$config" --storage.path=/alertmanager
