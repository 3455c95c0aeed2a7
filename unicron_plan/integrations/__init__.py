"""Scheduler adapters: read a cluster from Kubernetes or Slurm objects into a v1
instance, and turn a v1 plan back into the scheduler's own changes.

- :mod:`unicron_plan.integrations.k8s`: nodes, pods and PyTorchJob / Volcano Job /
  DLRover ElasticJob objects in; the patches each controller accepts, node labels, new objects
  and pod deletions out.
- :mod:`unicron_plan.integrations.slurm`: ``scontrol show nodes --json`` (``sinfo
  --json`` on Slurm 22.05) and ``squeue --json`` in; guarded ``scontrol`` steps out.
- :mod:`unicron_plan.integrations.agent`: the loop between Slurm and the coordinator
  (``unicron-plan agent slurm``), through :mod:`unicron_plan.client`.
- :mod:`unicron_plan.integrations.common`: planning fields, GPU type mapping and
  the instance assembly both share.

docs/integrations.md documents every field read and written.
"""
