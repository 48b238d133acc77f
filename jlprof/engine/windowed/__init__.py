"""The windowed engine: the same stages window by window, for traces too large to hold whole."""
