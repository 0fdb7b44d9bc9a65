"""Tests of the agent runtime: browser, observations, actions, executor, stop rules."""
