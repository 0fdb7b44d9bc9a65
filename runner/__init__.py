"""Running episodes: the confined browser, the executor, the episode loop, batches, backends, forced mode and
suites. Below the command line, above the agent (`agent`), the traces and the sites."""
