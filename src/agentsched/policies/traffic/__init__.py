"""Baselines under load: deciders for the stream simulator (``testbeds/stream.py``) that see the
live state, never the world. The load-aware planner is ``planner/traffic.py``."""
