"""``syshax status|set|save|reload|drain|enable|disable``: talk to the running daemon's control socket."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from syshaxd.cli._common import CommandError, UsageError, add_config_arg, load
from syshaxd.cli._status import render_state
from syshaxd.config import ConfigError, display_value, parse_value
from syshaxd.control_client import BlockingControlClient, ControlError, Forbidden, Rejected
from syshaxd.locate import client_socket_candidates
from syshaxd.schema import ConfigChangeModel, StateModel


class ControlClient(BlockingControlClient):
    """The control client of the ``syshax`` commands: its failures are the command's errors
    (a refused value exits 2 as a usage error; anything else exits 1 with the reason)."""

    def __init__(self, path: Path, looked: list[Path]) -> None:
        """Talk to the daemon at ``path`` (``looked`` lists where it was searched, for messages)."""
        super().__init__(path, looked=looked)
        self.path = path

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One request; the JSON answer, or CommandError/UsageError with the daemon's reason."""
        try:
            return super().request(method, path, body)
        except Rejected as exc:
            if exc.status == 422:
                raise UsageError(exc.message) from None
            raise CommandError(f"the daemon answered {exc.status}: {exc.message}") from None
        except Forbidden as exc:
            raise CommandError(f"not allowed: {exc.message}") from None
        except ControlError as exc:
            raise CommandError(exc.message) from None


def connect(args: argparse.Namespace) -> ControlClient:
    """A client for ``--socket``, else the config's socket, else the first default that exists."""
    if args.socket:
        path = Path(args.socket)
        return ControlClient(path, [path])
    try:
        config = load(args).config
    except ConfigError:
        if getattr(args, "config", None):
            raise
        config = None  # a broken default config is no reason not to find the daemon
    candidates = client_socket_candidates(config.control.socket if config is not None else None)
    chosen = next((p for p in candidates if p.exists()), candidates[0])
    return ControlClient(chosen, candidates)


def _add_common(p: argparse.ArgumentParser) -> None:
    add_config_arg(p)
    p.add_argument("--socket", metavar="PATH", help="control socket (else control.socket, else the default locations)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the commands that talk to the running daemon."""
    p = sub.add_parser("status", help="print the running daemon's state once (--json for scripts)")
    _add_common(p)
    p.add_argument("--json", action="store_true", help="print the raw state as JSON")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "set",
        help="change runtime keys of the running daemon (all or nothing)",
        description="Change runtime keys of the running daemon, e.g. `syshax set decider.cpu_max_batch_size 24`. "
        "Several KEY VALUE pairs are applied together or not at all. Values are read like YAML "
        "(24, 0.5, true, null). The change is lost on restart unless you run `syshax save`.",
    )
    _add_common(p)
    p.add_argument("pairs", nargs="+", metavar="KEY VALUE", help="dotted key and its new value")
    p.set_defaults(func=cmd_set)

    p = sub.add_parser("save", help="persist the running runtime values to the daemon's overrides file")
    _add_common(p)
    p.set_defaults(func=cmd_save)

    p = sub.add_parser("reload", help="make the daemon reread its config files (as SIGHUP does)")
    _add_common(p)
    p.set_defaults(func=cmd_reload)

    p = sub.add_parser(
        "drain", help="drain ENGINE (send it nothing new), or with no ENGINE the whole box, then stop syshaxd",
        description="With ENGINE: let it finish what it runs but route nothing new to it. Without: drain the "
        "whole box as SIGTERM does -- /health answers 503 at once (a cluster router stops sending), new "
        "requests are still served for system.drain_notice seconds, then in-flight ones finish and syshaxd exits.",
    )
    _add_common(p)
    p.add_argument("engine", metavar="ENGINE", nargs="?", help="engine name as `syshax status` shows it")
    p.set_defaults(func=cmd_engine, action="drain")
    for name, helptext in (
        ("enable", "route to ENGINE again (clears draining)"),
        ("disable", "stop routing to ENGINE"),
    ):
        p = sub.add_parser(name, help=helptext)
        _add_common(p)
        p.add_argument("engine", metavar="ENGINE", help="engine name as `syshax status` shows it")
        p.set_defaults(func=cmd_engine, action=name)


def cmd_status(args: argparse.Namespace) -> int:
    """Print the state once."""
    client = connect(args)
    try:
        data = client.request("GET", "/v1/state")
    finally:
        client.close()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    try:
        state = StateModel.model_validate(data)
    except ValidationError as exc:
        raise CommandError(f"the daemon sent a state this syshax cannot read: {exc.errors()[0]['msg']}") from None
    Console().print(*render_state(state, client.path))
    return 0


def _ask(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """One request on a connection of its own; the daemon's JSON answer."""
    client = connect(args)
    try:
        return client.request(method, path, body)
    finally:
        client.close()


def _change(args: argparse.Namespace, method: str, path: str, body: Any = None) -> ConfigChangeModel:
    """A request that changes the running config; what changed."""
    return ConfigChangeModel.model_validate(_ask(args, method, path, body))


def cmd_set(args: argparse.Namespace) -> int:
    """PATCH the given keys."""
    pairs: list[str] = args.pairs
    if len(pairs) % 2:
        raise UsageError(f"expected KEY VALUE pairs; {pairs[-1]!r} has no value")
    body = {pairs[i]: parse_value(pairs[i + 1]) for i in range(0, len(pairs), 2)}
    change = _change(args, "PATCH", "/v1/config", body)
    _print_change(change)
    if change.changed or change.engines:
        print("not saved yet: `syshax save` keeps the running values across restarts")
    return 0


def cmd_engine(args: argparse.Namespace) -> int:
    """drain / enable / disable one engine; drain without an engine drains the box."""
    if args.engine is None:
        return cmd_drain_box(args)
    key = f"engines.{args.engine}"
    body = {
        "drain": {f"{key}.draining": True},
        "enable": {f"{key}.enabled": True, f"{key}.draining": False},
        "disable": {f"{key}.enabled": False},
    }[args.action]
    change = _change(args, "PATCH", "/v1/config", body)
    flags = change.engines.get(args.engine, {})
    print(f"{args.engine}: enabled={_yn(flags.get('enabled'))} draining={_yn(flags.get('draining'))}")
    return 0


def cmd_drain_box(args: argparse.Namespace) -> int:
    """Drain the whole box (``POST /v1/drain``): the daemon stops once in-flight requests finish."""
    answer = _ask(args, "POST", "/v1/drain")
    print(f"draining: {answer.get('message', '')}" if isinstance(answer, dict) else "draining")
    return 0


def cmd_save(args: argparse.Namespace) -> int:
    """POST /v1/config/save."""
    change = _change(args, "POST", "/v1/config/save")
    if change.changed or change.engines:
        print(f"saved {len(change.changed)} runtime value(s) and {len(change.engines)} engine flag set(s) "
              f"to {change.path}:")
        for key, value in sorted(change.changed.items()):
            print(f"  {key} = {display_value(value)}")
        for name, flags in sorted(change.engines.items()):
            print(f"  engines.{name}: " + ", ".join(f"{flag}={display_value(on)}" for flag, on in sorted(flags.items())))
    else:
        print(f"nothing differs from the config file; {change.path} now holds no overrides")
    return 0


def cmd_reload(args: argparse.Namespace) -> int:
    """POST /v1/reload."""
    change = _change(args, "POST", "/v1/reload")
    _print_change(change)
    if change.needs_restart:
        print("changed in the file but only applied on restart: " + ", ".join(change.needs_restart))
    return 0


def _print_change(change: ConfigChangeModel) -> None:
    if not change.changed and not change.engines:
        print("no change: the daemon already runs with these values")
    for key, value in sorted(change.changed.items()):
        print(f"{key} = {display_value(value)}")
    for name, flags in sorted(change.engines.items()):
        print(f"{name}: enabled={_yn(flags.get('enabled'))} draining={_yn(flags.get('draining'))}")


def _yn(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")
