"""From steps and telemetry to findings: one analysis entry point and its rules."""
