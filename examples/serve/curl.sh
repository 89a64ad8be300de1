#!/usr/bin/env bash
# The API from the shell, against a server started from this folder (examples/serve) with:
#   agentsched serve workflows --store serve.db
set -euo pipefail
URL=${URL:-http://127.0.0.1:8000}
curl -s -X POST "$URL/v1/workflows/wordstats/invocations" -H 'content-type: application/json' \
  -d '{"inputs": {"text": "the quick brown fox"}}'; echo
curl -s "$URL/v1/workflows"; echo
curl -s "$URL/v1/workflows/wordstats/history?limit=5"; echo
curl -s -X PUT "$URL/v1/workflows/shout/mapping" -H 'content-type: application/json' \
  -d '{"mapping": {"shout": "cpu"}}'; echo
curl -s -X DELETE "$URL/v1/workflows/shout/mapping"; echo
curl -s "$URL/healthz"; echo
curl -s "$URL/metrics" | grep '^agentsched_' | head
