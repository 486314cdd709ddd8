"""From sampled stacks to phases and steps: rules, loop, step clock, per-rank statistics."""
