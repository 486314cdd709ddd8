"""Helpers that tests/, bench/, docs/ and .ci/ share, not shipped with the package: synthetic
stacks and the simulated jobs (stacks.py, simulator.py), recorded streams read and looped
(streams.py, live_streams.py), the TUI driven in process and in a real terminal (tui_support.py,
tui_tmux.py) and the headless browser (browser.py)."""
