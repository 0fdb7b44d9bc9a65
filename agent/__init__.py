"""The web agent itself: the action grammar, the observation, the prompt and `ModelAgent` (the model behind one
live KV cache). How an episode is run lives in `runner`, the command line in `cli`."""
