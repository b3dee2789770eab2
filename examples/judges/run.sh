#!/usr/bin/env bash
# Compare five judge models served by the local simulator (no key, no network).
# Prices are user overrides in USD per million input,output tokens.
set -euo pipefail
cd "$(dirname "$0")"
skynet-eval judges --metric metric.py --data data.jsonl \
  --models judge-large,judge-medium,judge-mini,judge-nano,judge-legacy --reference judge-large \
  --simulator simulator.json \
  --price judge-large=3,15 --price judge-medium=0.8,4 --price judge-mini=0.15,0.6 \
  --price judge-nano=0.05,0.2 --price judge-legacy=2,10 \
  --output judges.json --plot judges.png "$@"
