#!/bin/sh
# Planned training jobs on the testbed (scripts/slurm-testbed up; then: . /var/lib/unicron-testbed/env).
# A job is planned when its comment starts with "unicron-plan:"; the others keep their GPUs.
set -eu
T='8:100,16:195,24:285,32:370,40:450,48:525,56:595,64:660'
sbatch -N 3 --gres=gpu:h100:8 --comment "unicron-plan: weight=2 throughput=$T" -o /dev/null --wrap 'sleep 3600'
sbatch -N 3 --gres=gpu:h100:8 --comment "unicron-plan: weight=1 throughput=$T" -o /dev/null --wrap 'sleep 3600'
sbatch -N 1 --gres=gpu:h100:4 --comment 'evaluation' -o /dev/null --wrap 'sleep 3600'
