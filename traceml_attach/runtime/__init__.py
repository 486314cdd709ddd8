"""Running a live session: samplers, the recording they feed, and the threads around them."""
