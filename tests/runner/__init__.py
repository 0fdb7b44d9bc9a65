"""Tests of running episodes: the confined browser, the executor, the episode loop, batches, backends, forced mode,
decision replay."""
