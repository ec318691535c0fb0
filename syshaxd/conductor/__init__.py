"""The conductor: admission, the flight (a request that owns its books), dispatch, splits, stats."""
