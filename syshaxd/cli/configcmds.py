"""Config commands, as sysHAX has them: init, config, check-config, interfaces, model, version, run."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources

from syshaxd import __version__
from syshaxd import config as cfg
from syshaxd.cli._common import (
    CommandError,
    UsageError,
    add_config_arg,
    load,
    load_file_only,
    target_path,
)

_VALUE_HELP = (
    "VALUE is converted to the key's type: integers, numbers, true/false, text as given, "
    "null where a key allows it, and a YAML/JSON list for endpoints, e.g. "
    "syshax config services.cpu.endpoints '[{name: cpu1, port: 8004}]' ('[]' clears it)."
)


def example_text() -> str:
    """The commented example config shipped with the package."""
    path = resources.files("syshaxd").joinpath("data/config.example.yaml")
    return path.read_text(encoding="utf-8")


def keys_help() -> str:
    """Every key with its type, default, meaning and allowed values (``config --help``)."""
    lines = ["keys (type, default), meaning, allowed values:"]
    for info in cfg.iter_keys():
        lines.append(f"  {info.key}  ({info.type_name}, default {cfg.display_value(info.default)})")
        if info.description:
            lines.append(f"      {info.description}")
        lines.append(f"      allowed: {info.allowed}")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the config commands."""
    p = sub.add_parser(
        "init",
        help="write a config file from the commented example",
        description="Write the commented example config to --config, $SYSHAX_CONFIG, or "
        "./config/config.yaml (an existing default location is refused too).",
    )
    add_config_arg(p)
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser(
        "config",
        help="print or set one key of the config file",
        description="Print (KEY) or set (KEY VALUE) one key of the YAML config file. The file "
        "keeps its comments, is validated before it is written, and is replaced atomically; "
        "a bad value leaves it untouched. " + _VALUE_HELP,
        epilog=keys_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arg(p)
    p.add_argument("key", nargs="?", help="dotted key, e.g. decider.cpu_max_batch_size")
    p.add_argument("value", nargs="?", help="new value; see above")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("check-config", help="validate the config and say where values came from")
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


def cmd_init(args: argparse.Namespace) -> int:
    """Write the example config."""
    path = target_path(args)
    if path.exists() and not args.force:
        raise CommandError(f"{path} exists; use --force to overwrite it")
    cfg.atomic_write(path, example_text())
    print(f"wrote {path}; change a key with: syshax config KEY VALUE")
    return 0


def _env_var_for(key: str) -> str | None:
    var = cfg.env_var(key)
    return var if var in os.environ else None


def cmd_config(args: argparse.Namespace) -> int:
    """Print or set one key."""
    if not args.key:
        print(keys_help())
        return 0
    if args.key not in cfg.all_keys():
        raise UsageError(str(cfg.unknown_key_error(args.key)))
    if args.value is None:
        print(cfg.display_value(cfg.get_dotted(load_file_only(args).config, args.key)))
    else:
        path = target_path(args)
        if not path.exists():
            raise cfg.ConfigError(
                "config file not found; create it with 'syshax init'", source=str(path)
            )
        value = cfg.set_in_file(path, args.key, args.value)
        print(f"{args.key} = {cfg.display_value(value)}  ({path})")
    var = _env_var_for(args.key)
    if var:
        print(f"note: ${var} is set and overrides this value at run time", file=sys.stderr)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Validate the layered config and show which keys the layers set."""
    loaded = load(args)
    print(f"config ok: {loaded.path or 'no file found, built-in defaults'}")
    overrides = loaded.overrides_path
    if overrides is not None and overrides.exists():
        print(f"runtime overrides: {overrides}")
    engines = cfg.engine_specs(loaded.config)
    gpus = sum(1 for e in engines if e.device == "gpu")
    print(f"engines: {gpus} GPU, {len(engines) - gpus} CPU; policy {loaded.config.decider.policy}")
    for key, source in sorted(loaded.sources.items()):
        if not source.startswith("file"):
            value = cfg.display_value(cfg.get_dotted(loaded.config, key))
            print(f"  {key} = {value}  (from {source})")
    return 0


def cmd_interfaces(args: argparse.Namespace) -> int:
    """Print the engine and conductor URLs."""
    loaded = load(args)
    for spec in cfg.engine_specs(loaded.config):
        print(f"{spec.device:<9} {spec.name:<8} {spec.url}  ({spec.dialect})")
    print(f"{'conductor':<9} {'':<8} {loaded.config.services.conductor.url()}/v1")
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
    from syshaxd.service import main as daemon_main  # the server stack loads only for `syshax run`

    argv = ["--config", args.config] if getattr(args, "config", None) else []
    sys.stdout.flush()
    return daemon_main(argv)
