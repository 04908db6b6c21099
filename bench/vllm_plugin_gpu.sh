#!/usr/bin/env bash
# Replaced by bench/vllm_startup_proof.sh: the proof in parts that each fit one device call (the
# old one-call loop over both models, arms and temperatures did not fit 10 minutes, made a new
# model directory per run, which made every warm run recompile, and shared Triton's cache between
# arms). Kept as a name; it runs the new script with the same environment and arguments, e.g.
#   PARTS="plugin-cold" bash bench/vllm_plugin_gpu.sh        (see bench/vllm_startup_proof.sh)
exec bash "$(dirname "$0")/vllm_startup_proof.sh" "$@"
