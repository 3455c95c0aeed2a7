"""Failure taxonomy, severity classes and the failure, detection and recovery constants."""
