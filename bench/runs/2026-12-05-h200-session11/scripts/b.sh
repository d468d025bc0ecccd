#!/usr/bin/env bash
# Call B (carries .bench/c2): the synthetic models are written in the background, one writer
# per group.
source .bench/s11/common.sh
(setsid nohup bash bench/h200.sh models llama1b-f16 llama1b-q4_0 >"$W/models-1b.log" 2>&1 &)
(setsid nohup bash bench/h200.sh models llama8b-q4_k_m llama8b-q4_0 >"$W/models-8b.log" 2>&1 &)
(setsid nohup bash bench/h200.sh models llama8b-f16 >"$W/models-8b16.log" 2>&1 &)
sleep 10; tail -1 "$W/models-1b.log"; tail -1 "$W/build.log"
