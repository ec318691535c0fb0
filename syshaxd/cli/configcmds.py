"""Config commands, as sysHAX has them: init, config, check-config, interfaces, model, version, run."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources
from pathlib import Path

from syshaxd import __version__
from syshaxd.cli._common import CommandError, UsageError, add_config_arg, load
from syshaxd.config import (
    DEFAULT_LOCATIONS,
    ConfigError,
    all_keys,
    display_value,
    engine_specs,
    find_config_path,
    get_dotted,
    set_in_file,
)


def example_text() -> str:
    """The commented example config shipped with the package."""
    return resources.files("syshaxd").joinpath("data/config.example.yaml").read_text(encoding="utf-8")


def _keys_help() -> str:
    lines = ["keys (type, default: meaning):"]
    for info in all_keys().values():
        lines.append(f"  {info.key}  ({info.type_name}, default {display_value(info.default)})")
        if info.description:
            lines.append(f"      {info.description}")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the config commands."""
    p = sub.add_parser("init", help="write a config file from the commented example")
    add_config_arg(p)
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser(
        "config",
        help="print or set one key of the config file",
        description="Print (KEY) or set (KEY VALUE) one key of the YAML config file. "
        "Values are type-checked; the file keeps its comments and is written atomically.",
        epilog=_keys_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arg(p)
    p.add_argument("key", nargs="?", help="dotted key, e.g. services.gpu.port")
    p.add_argument("value", nargs="?", help="new value (YAML scalar: 24, true, null, text)")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("check-config", help="validate the config and say where it came from")
    add_config_arg(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("interfaces", help="print the GPU, CPU and conductor URLs")
    add_config_arg(p)
    p.set_defaults(func=cmd_interfaces)

    p = sub.add_parser("model", help="print the default model name")
    add_config_arg(p)
    p.set_defaults(func=cmd_model)

    p = sub.add_parser("version", help="print the version")
    p.set_defaults(func=cmd_version)

    p = sub.add_parser("run", help="start the daemon (syshaxd) in the foreground")
    add_config_arg(p)
    p.set_defaults(func=cmd_run)


def _target_path(args: argparse.Namespace) -> Path:
    """The file `init`/`config` edit: the one found by the lookup order, else ./config/config.yaml."""
    explicit = getattr(args, "config", None)
    if explicit:
        return Path(explicit)
    if os.environ.get("SYSHAX_CONFIG"):
        return Path(os.environ["SYSHAX_CONFIG"])
    found = find_config_path(None)
    return found if found is not None else DEFAULT_LOCATIONS[-1]


def cmd_init(args: argparse.Namespace) -> int:
    """Write the example config."""
    path = _target_path(args)
    if path.exists() and not args.force:
        raise CommandError(f"{path} exists; use --force to overwrite it")
    from syshaxd.config import atomic_write

    try:
        atomic_write(path, example_text())
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"wrote {path}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """Print or set one key."""
    if not args.key:
        print(_keys_help())
        return 0
    known = all_keys()
    if args.value is None:
        if args.key not in known:
            from syshaxd.config import suggest

            hint = suggest(args.key, list(known))
            extra = f" (did you mean {hint!r}?)" if hint else ""
            raise UsageError(f"unknown key {args.key!r}{extra}; 'syshax config --help' lists every key")
        loaded = load(args, use_overrides=False)
        print(display_value(get_dotted(loaded.config, args.key)))
        return 0
    path = _target_path(args)
    if not path.exists():
        raise ConfigError(f"config file not found: {path}; create it with 'syshax init'")
    value = set_in_file(path, args.key, args.value)
    print(f"{args.key} = {display_value(value)}  ({path})")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Validate the layered config."""
    loaded = load(args)
    engine_specs(loaded.config)
    where = str(loaded.path) if loaded.path else "no file found, built-in defaults"
    print(f"config ok: {where}")
    if loaded.overrides_path and loaded.overrides_path.exists():
        print(f"runtime overrides: {loaded.overrides_path}")
    for key, source in sorted(loaded.sources.items()):
        if source.startswith("env"):
            print(f"  {key} from {source}")
    return 0


def cmd_interfaces(args: argparse.Namespace) -> int:
    """Print the engine and conductor URLs."""
    loaded = load(args)
    for spec in engine_specs(loaded.config):
        print(f"{spec.device}  {spec.name:<8} {spec.url}  ({spec.dialect})")
    print(f"conductor       {loaded.config.services.conductor.url()}/v1")
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    """Print the default model."""
    print(load(args).config.models.default)
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    """Print the version."""
    print(f"syshax {__version__}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run syshaxd in this process."""
    from syshaxd.main import main as daemon_main

    argv = ["--config", args.config] if getattr(args, "config", None) else []
    sys.stdout.flush()
    return daemon_main(argv)
