"""The running daemon: entry point, wiring, servers, signals, systemd, startup check, vitals."""
