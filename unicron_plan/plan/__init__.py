"""From solver counts to a checked plan: placement on nodes, plan assembly, the independent validator, contingency tables."""
