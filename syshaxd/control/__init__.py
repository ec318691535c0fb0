"""The control API on the Unix socket: state, events, runtime config."""
