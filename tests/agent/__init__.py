"""Tests of the agent itself: the action grammar, observations as text, the prompt and demonstrations, constrained
decoding and stop rules."""
