"""Collect many nodes' frames: the agents' links, and their merge into one recording."""
