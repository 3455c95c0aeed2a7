"""Data package: model, GPU, efficiency and transition-cost specs as JSON.

Shipped in the wheel as ``unicron_plan.models_data``; read with importlib.resources.
"""
