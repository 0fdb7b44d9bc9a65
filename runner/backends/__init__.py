"""Ways to run eval episodes beyond this process: `ray` (a Ray cluster)."""
