#!/usr/bin/env bash
# Compare five judge models across two providers (models.toml), each example judged three
# times, served by local simulators (no key, no network): one simulator per provider.
# The report and the plot go to out/ (ignored by git): the tracked judges.png is the
# README's picture and stays as it is. The simulators draw latency and verdict noise, so
# the figures (latency, agreement, cost per 1,000) vary a little from run to run.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p out
skynet-eval judges --metric metric.py --data data.jsonl \
  --models-file models.toml --reference claude-large --repeat 3 --project 100000 \
  --simulator simulator.json --output out/judges.json --plot out/judges.png "$@"
echo "written: out/judges.json, out/judges.png (figures vary from run to run: simulated latency and noise)"
