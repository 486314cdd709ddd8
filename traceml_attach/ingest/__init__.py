"""Decoding the frame stream into a bounded, replayable recording."""
