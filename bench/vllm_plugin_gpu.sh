#!/usr/bin/env bash
# Replaced by bench/vllm_startup_proof.sh: the proof in parts that each fit one device call, with
# one model directory per model and each arm its own caches (its rules say why). Kept as a name; it
# runs the new script with the same environment and arguments, e.g.
#   PARTS="plugin-cold" bash bench/vllm_plugin_gpu.sh        (see bench/vllm_startup_proof.sh)
exec bash "$(dirname "$0")/vllm_startup_proof.sh" "$@"
