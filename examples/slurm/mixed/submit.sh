#!/bin/sh
# The jobs of sinfo-22.05.json / squeue-22.05.json, on the testbed's mixed fleet (scripts/slurm-testbed up:
# n1-n8 gpu:h100:8, n9-n12 gpu:a100:8, each with its GPU type as a node feature); then:
#   scontrol update NodeName=n7 State=DOWN Reason=gpu-xid-79
# A job that may run on several GPU types asks for untyped GPUs (--gres=gpu:8): Slurm does not change
# the type of a pending job's request. The matching-OR constraint [h100|a100] keeps Slurm from giving
# it nodes of two types; its comment lists the types and a throughput table per type.
set -eu
T='8:100,16:195,24:285,32:370,40:450,48:525'
sbatch -N 6 --gres=gpu:h100:8 --comment "unicron-plan: weight=2 throughput=$T" -o /dev/null --wrap 'sleep 3600'
sbatch -N 1 -w n7 --gres=gpu:8 --constraint='[h100|a100]' \
  --comment 'unicron-plan: weight=1 gpu-types=h100,a100 throughput.h100=8:100,16:195 throughput.a100=8:35,16:68,24:100,32:130' \
  -o /dev/null --wrap 'sleep 3600'
sbatch -H -N 2 --gres=gpu:8 --constraint='[h100|a100]' \
  --comment 'unicron-plan: weight=1 gpu-types=a100,h100 throughput.a100=8:30,16:58 throughput.h100=8:90,16:175' \
  -o /dev/null --wrap 'sleep 3600'
sbatch -N 1 -w n8 --gres=gpu:h100:4 --comment 'evaluation' -o /dev/null --wrap 'sleep 3600'
