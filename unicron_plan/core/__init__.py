"""The planning model: cluster state, cross-field checks, constraints, objective terms and the dense problem."""
