#!/usr/bin/env bash
# Compare five judge models across two providers (models.toml), each example judged three
# times, served by local simulators (no key, no network): one simulator per provider.
set -euo pipefail
cd "$(dirname "$0")"
skynet-eval judges --metric metric.py --data data.jsonl \
  --models-file models.toml --reference claude-large --repeat 3 --project 100000 \
  --simulator simulator.json --output judges.json --plot judges.png "$@"
