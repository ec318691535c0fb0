"""``syshaxd``: the daemon's command line. Loads the config (exit 2 on a mistake) and runs the daemon."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from syshaxd import __version__
from syshaxd.config import ConfigError, engine_specs, load_config

log = logging.getLogger("syshaxd")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options of syshaxd."""
    parser = argparse.ArgumentParser(prog="syshaxd", description="the syshax conductor daemon")
    parser.add_argument("--config", metavar="PATH", help="config file")
    parser.add_argument("--version", action="version", version=f"syshaxd {__version__}")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the daemon until stopped. Exit 2 on a configuration error."""
    args = parse_args(argv)
    try:
        loaded = load_config(args.config)
        engine_specs(loaded.config)
    except ConfigError as exc:
        print(f"syshaxd: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=loaded.config.logging.level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    # httpx logs every request at INFO: one line per engine scrape per second is noise.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    from syshaxd.service.daemon import run_daemon

    return run_daemon(loaded)


if __name__ == "__main__":
    sys.exit(main())
