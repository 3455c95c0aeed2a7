"""Failure, detection and recovery constants: the one place the simulator and
:mod:`unicron_plan.faults.severity` take them from.

Each constant cites its source in ``docs/data/failures.md`` ("failures.md"
below). Constants marked ASSUMPTION have no number in that file; they are
this package's choice, kept small and named so they can be changed in one place.
"""

from __future__ import annotations

import math

# --- Unicron (arXiv 2401.00134), Table 1 (failures.md): error kind -> (severity, detection method) ---
# Detection methods: node health (heartbeat), process supervision, exception propagation, and
# online statistical monitoring of iteration time.
ERROR_TAXONOMY: dict[str, tuple[str, str]] = {
    # SEV1: reconfigure the cluster (isolate the node, re-plan)
    "lost_connection": ("sev1", "node_health"),
    "ecc_error": ("sev1", "exception_propagation"),
    "invalid_dma_mapping": ("sev1", "exception_propagation"),
    "nvlink_error": ("sev1", "exception_propagation"),
    "gpu_driver_error": ("sev1", "exception_propagation"),
    # SEV2: restart the process
    "exited_abnormally": ("sev2", "process_supervision"),
    "illegal_memory_access": ("sev2", "exception_propagation"),
    "cuda_error": ("sev2", "exception_propagation"),
    "task_hang": ("sev2", "statistical_monitoring"),
    "other_software_error": ("sev2", "exception_propagation"),
    # SEV3: reattempt in place
    "link_flapping": ("sev3", "statistical_monitoring"),
    "connection_refused": ("sev3", "exception_propagation"),
    "connection_reset": ("sev3", "exception_propagation"),
    "other_network_error": ("sev3", "exception_propagation"),
}

# --- Unicron Figure 1 (failures.md): % of the top-5% tasks that ended with each error ---
# Used to draw an error kind within a severity. "others" (3.3) is mapped to other_software_error;
# "NCCL timeout" (10.1) is a symptom of the errors above and is left out; lost_connection and
# exited_abnormally do not appear in Figure 1 and get weight 0 when drawing.
FIGURE1_PERCENT: dict[str, float] = {
    "ecc_error": 5.0, "nvlink_error": 4.5, "invalid_dma_mapping": 2.1, "gpu_driver_error": 0.6,
    "task_hang": 3.1, "illegal_memory_access": 2.1, "cuda_error": 1.6, "other_software_error": 3.3,
    "link_flapping": 3.9, "other_network_error": 4.0, "connection_refused": 2.1, "connection_reset": 1.0,
    "lost_connection": 0.0, "exited_abnormally": 0.0,
}

# --- Detection time per method ---
# failures.md: "Without in-band detection a hang lasts until the NCCL timeout, up to 30 minutes."
NCCL_TIMEOUT_SECONDS = 30 * 60.0
# ASSUMPTION: one training iteration of the library's GPT-3 jobs takes about 20 s.
ITERATION_SECONDS = 20.0
# failures.md (Table 1 notes): an iteration over 3x the running average flags a hang or link flapping.
STATISTICAL_MONITORING_SECONDS = 3 * ITERATION_SECONDS
# ASSUMPTION: a missed heartbeat is noticed within 30 s; a process exit or a raised exception within 5 s.
HEARTBEAT_SECONDS = 30.0
PROCESS_SUPERVISION_SECONDS = 5.0
EXCEPTION_PROPAGATION_SECONDS = 5.0

IN_BAND_DETECTION_SECONDS: dict[str, float] = {
    "node_health": HEARTBEAT_SECONDS,
    "process_supervision": PROCESS_SUPERVISION_SECONDS,
    "exception_propagation": EXCEPTION_PROPAGATION_SECONDS,
    "statistical_monitoring": STATISTICAL_MONITORING_SECONDS,
}

# --- Restart cost without Unicron: Unicron Figure 2 (failures.md), GPT-3 on 256 H800 ---
# "a restart costs about 68 minutes: up to 30 min hang until timeout, 9 min to resubmit,
#  14 min environment and CUDA set-up, 15 min recomputing lost progress."
RESUBMIT_SECONDS = 9 * 60.0
SETUP_SECONDS = 14 * 60.0
RESTART_SECONDS = RESUBMIT_SECONDS + SETUP_SECONDS
# Checkpoints every 30 min of training: the work lost at a failure is the time since the last
# one, 15 min on average, matching Figure 2's 15 min of recomputation.
CHECKPOINT_INTERVAL_SECONDS = 30 * 60.0

# --- Unicron's own actions ---
# SEV3 "reattempt in place": ASSUMPTION, redo the failed iteration.
REATTEMPT_SECONDS = ITERATION_SECONDS
# SEV2 "restart the process" and SEV1 re-plans cost the job's D_trans (transition_seconds), as in
# the planner's cost model; the job resumes from the state of its healthy replicas, so no work is
# recomputed beyond what D_trans covers (ASSUMPTION, after Unicron's transition strategy).

# --- Failure rates (failures.md) ---
# Llama 3 405B (Table 5): 3.79 unexpected interruptions per 1000 node-days ->
# MTBF = 1000 * 24 / 3.79 = 6332 h per node.
LLAMA3_INTERRUPTIONS_PER_1000_NODE_DAYS = 3.79
LLAMA3_NODE_MTBF_HOURS = 1000 * 24 / LLAMA3_INTERRUPTIONS_PER_1000_NODE_DAYS
# Meta research clusters (Kokolis et al.): 6.50 and 2.34 failures per 1000 node-days.
META_RSC_FAILURES_PER_1000_NODE_DAYS = (6.50, 2.34)
# "Node repair or replacement: hours to a day" -> the library uses a lognormal with median 12 h
# and log-sigma 1.0 (ASSUMPTION within that range); LANL: repair times fit a lognormal.
REPAIR_MEDIAN_HOURS = 12.0
REPAIR_SIGMA = 1.0
# Its mean, median x exp(sigma^2 / 2) = 19.8 h: the expected repair the "lifetime" horizon assumes
# for a failed node when the event gives no estimate (docs/model.md).
REPAIR_MEAN_SECONDS = REPAIR_MEDIAN_HOURS * 3600.0 * math.exp(REPAIR_SIGMA ** 2 / 2)
