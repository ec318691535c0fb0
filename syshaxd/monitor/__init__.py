"""The monitor: engine scrapes, the host and its NUMA layout, into one immutable Snapshot."""
